"""http_post.py — the request the server test scripts send: a JSON body (or raw
bytes) POSTed to http://127.0.0.1:PORT/v1/PATH; returns (status, body text),
HTTP error statuses included (the tests check them)."""
import json, urllib.request, urllib.error


def post_json(port, path, body=None, raw=None):
    data = raw if raw is not None else json.dumps(body).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/{path}", data=data,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()
