#!/bin/sh
# cli_toolcheck.sh — `moefast toolcheck` (the sanitized client):
#   against `moefast serve` (the release binary, for time) on a random-weight
#     qwen3moe: every structural scenario passes, exit 0, --json and --csv
#     hold one record per scenario; the same on llama3, mistral, deepseek3, glm4 and kimi-k2
#     models with their own templates (gen --chat-template F-tools);
#   against a fake endpoint (python3) that answers every chat request with
#     finish_reason tool_calls and an empty message, as servers whose parser
#     rejected the model's text do: the structural scenarios fail as
#     empty_response / wrong_status, each kept with its request and response,
#     exit 1;
#   bad command lines and an unreachable URL exit 2 with one line.
set -u
. tests/lib.sh   # serve_port
BIN=${MOEFAST_BIN:-build/asan/moefast}
REL=${MOEFAST_BIN_REL:-build/rel/moefast}
[ -x "$REL" ] || REL=$BIN
command -v python3 >/dev/null 2>&1 || { echo "SKIP: python3 is not installed"; exit 0; }
T=$(mktemp -d /tmp/moefast-cli-toolcheck.XXXXXX) || exit 2
PIDS=""
cleanup() { for p in $PIDS; do kill -9 "$p" 2>/dev/null; done; rm -rf "$T"; }
trap cleanup EXIT
rc=0
fail() { echo "FAIL: $*"; rc=1; }

# bad command lines: exit 2, one line naming the problem
bad() { # label want args...
  label=$1; want=$2; shift 2
  "$BIN" toolcheck "$@" >"$T/out" 2>"$T/err"; r=$?
  [ $r -eq 2 ] || fail "$label: exit $r (want 2)"
  [ "$(wc -l <"$T/err")" -eq 1 ] && grep -qF -- "$want" "$T/err" || fail "$label: stderr lacks '$want': $(cat "$T/err")"
}
bad "no url" "URL is required"
bad "bad url" "must start with http" ftp://x
bad "unknown option" "unknown argument '--bogus'" http://127.0.0.1:1/v1 --bogus
bad "timeout" "--timeout must be" http://127.0.0.1:1/v1 --timeout 0
bad "missing value" "--json needs a value" http://127.0.0.1:1/v1 --json
bad "unreachable" "127.0.0.1:1" http://127.0.0.1:1/v1

M=$T/q.gguf
"$REL" gen --arch qwen3moe --preset tiny --type Q8_0 -o "$M" >/dev/null || { echo "gen failed"; exit 1; }
"$REL" serve -m "$M" --port 0 --slots 4 >/dev/null 2>"$T/log" &
PIDS="$PIDS $!"
PORT=$(serve_port "$T/log" $!) || { echo "server did not start: $(cat "$T/log")"; exit 1; }
"$BIN" toolcheck "http://127.0.0.1:$PORT/v1/" --json "$T/ok.json" --csv "$T/ok.csv" >"$T/ok.out" 2>&1 ||
  fail "toolcheck against moefast serve: $(grep -v '^ok' "$T/ok.out")"
grep -q "structural \([0-9]*\)/\1 passed" "$T/ok.out" || fail "not every structural scenario passed: $(tail -1 "$T/ok.out")"

# the other template families, each with its own template and special tokens
# (gen --chat-template F-tools): every structural scenario passes. The seeds
# give random weights that end their calls within the scenarios' max_tokens
# (other seeds may keep calling in parallel until the limit: a model's
# choice, which the server must allow)
for fs in llama3:42 mistral:2 deepseek3:12 glm4:11 kimi-k2:1; do
  fam=${fs%:*}
  "$REL" gen --arch qwen3moe --preset tiny --type Q8_0 --chat-template "$fam-tools" --seed "${fs#*:}" -o "$T/$fam.gguf" >/dev/null || { echo "gen $fam failed"; exit 1; }
  "$REL" serve -m "$T/$fam.gguf" --port 0 --slots 4 --ctx 8192 >/dev/null 2>"$T/log-$fam" &
  FPID=$!
  FPORT=$(serve_port "$T/log-$fam" $FPID) || fail "$fam: the server did not start: $(cat "$T/log-$fam")"
  "$BIN" toolcheck "http://127.0.0.1:$FPORT/v1" >"$T/$fam.out" 2>&1
  grep -q "structural \([0-9]*\)/\1 passed" "$T/$fam.out" || fail "$fam: not every structural scenario passed: $(grep '^FAIL' "$T/$fam.out"; tail -1 "$T/$fam.out")"
  kill -TERM $FPID; wait $FPID 2>/dev/null
done

# a server that answers every chat request with an empty tool_calls message
cat >"$T/fake.py" <<'PY'
import http.server, json, sys
class H(http.server.BaseHTTPRequestHandler):
    def log_message(self, *a): pass
    def send(self, code, body, ctype="application/json"):
        b = body.encode(); self.send_response(code); self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(b))); self.end_headers(); self.wfile.write(b)
    def do_GET(self): self.send(200, json.dumps({"object": "list", "data": [{"id": "fake", "object": "model"}]}))
    def do_POST(self):
        try:
            req = json.loads(self.rfile.read(int(self.headers["Content-Length"])) or b"{}")
        except ValueError:
            req = {}                    # bad JSON: answered 200 all the same, as some servers do
        msg = {"role": "assistant", "content": None}
        if req.get("stream"):
            ev = lambda d: "data: " + json.dumps(d) + "\n\n"
            self.send(200, ev({"choices": [{"index": 0, "delta": msg, "finish_reason": None}]}) +
                      ev({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}) + "data: [DONE]\n\n", "text/event-stream")
        else:
            self.send(200, json.dumps({"choices": [{"index": 0, "message": msg, "finish_reason": "tool_calls"}]}))
s = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
print(s.server_address[1], flush=True)
s.serve_forever()
PY
python3 "$T/fake.py" >"$T/fake.port" &
PIDS="$PIDS $!"
for _ in $(seq 1 100); do [ -s "$T/fake.port" ] && break; sleep 0.1; done
FP=$(cat "$T/fake.port")
"$BIN" toolcheck "http://127.0.0.1:$FP/v1" --json "$T/bad.json" --csv "$T/bad.csv" >"$T/bad.out" 2>&1
r=$?
[ $r -eq 1 ] || fail "toolcheck against the fake server: exit $r (want 1): $(tail -3 "$T/bad.out")"

python3 - "$T" <<'PY' || rc=1
import csv, json, sys
T = sys.argv[1]
ok = True
def bad(m):
    global ok; ok = False; print("FAIL:", m)
good, badj = json.load(open(f"{T}/ok.json")), json.load(open(f"{T}/bad.json"))
n = len(good["results"])
if n < 40: bad(f"only {n} scenarios")
s = good["summary"]
if s["structural_passed"] != s["structural"] or s["structural"] + s["trained"] != n: bad(f"summary {s}")
rows = list(csv.DictReader(open(f"{T}/ok.csv")))
if len(rows) != n or {r["name"] for r in rows} != {r["name"] for r in good["results"]}: bad("the CSV rows are not the scenarios")
cats = {r["category"] for r in good["results"]}
for c in ("shapes", "choice", "parallel", "stream", "multi-turn", "trap", "limits", "errors"):
    if c not in cats: bad(f"no {c} scenarios")
classes = {}
for r in badj["results"]:
    if r["kind"] == "structural" and r["category"] not in ("errors",):
        if r["pass"] and r["name"] not in ("choice-none", "stream-none", "turn-result-none"):
            bad(f"fake server passed {r['name']}")
    if not r["pass"]:
        classes[r["class"]] = classes.get(r["class"], 0) + 1
        if "request" not in r or "response" not in r: bad(f"{r['name']}: failure without request/response")
for c in ("empty_response", "wrong_status"):
    if not classes.get(c): bad(f"no {c} failure against the fake server ({classes})")
print("toolcheck checks:", "ok" if ok else "failed", classes)
sys.exit(0 if ok else 1)
PY
for p in $PIDS; do kill -TERM "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
PIDS=""
exit $rc
