// test.mjs — drives `moefast serve` with the official OpenAI SDK (run by
// tests/cli_serve.sh with BASE=http://127.0.0.1:PORT/v1, KEY, MODEL).
// Checks the response shapes the SDK parses, that a streamed answer is the
// non-streamed one in pieces, and that a request's tokens (and logprobs) are the same bits
// alone or among 7 others, streamed or not, after a prompt-cache hit or a
// cold prefill, greedy or seeded. With TOOLS_ONLY=1 (tests/cli_serve_tools.sh),
// tool calls instead. Prints one line per check; exits 1 on a failure.
import OpenAI from 'openai';

const { BASE, KEY, MODEL } = process.env;
const client = new OpenAI({ baseURL: BASE, apiKey: KEY, maxRetries: 0, timeout: 60000 });
let failures = 0;
const fail = (msg) => { failures++; console.log(`FAIL: ${msg}`); };
const ok = (msg) => console.log(`ok ${msg}`);
const eq = (a, b) => JSON.stringify(a) === JSON.stringify(b);

// One request; streamed answers are reassembled into the non-streamed shape.
async function ask(kind, body, stream) {
  const p = { model: MODEL, ...body, return_tokens: true };
  if (!stream) {
    const r = kind === 'chat' ? await client.chat.completions.create(p) : await client.completions.create(p);
    const c = r.choices[0];
    return { text: kind === 'chat' ? c.message.content : c.text, finish: c.finish_reason, tokens: c.tokens, usage: r.usage, raw: r,
             logprobs: c.logprobs };
  }
  const s = kind === 'chat'
    ? await client.chat.completions.create({ ...p, stream: true, stream_options: { include_usage: true } })
    : await client.completions.create({ ...p, stream: true, stream_options: { include_usage: true } });
  let text = '', finish = null, tokens = null, usage = null, n = 0, role = null, nfinish = 0, logprobs = null;
  // the chunks' logprobs joined: chat content entries; completions' parallel arrays
  const addLp = (lp) => {
    if (!lp) return;
    if (!logprobs) logprobs = kind === 'chat' ? { content: [], refusal: null } : { tokens: [], token_logprobs: [], top_logprobs: [], text_offset: [] };
    for (const k of Object.keys(logprobs)) if (Array.isArray(logprobs[k])) logprobs[k].push(...lp[k]);
  };
  for await (const ch of s) {
    n++;
    if (ch.usage) { usage = ch.usage; if (ch.choices.length !== 0) fail('usage chunk has choices'); continue; }
    const c = ch.choices[0];
    if (kind === 'chat') {
      if (n === 1) role = c.delta.role;
      text += c.delta.content ?? '';
    } else text += c.text;
    addLp(c.logprobs);
    if (c.finish_reason) { finish = c.finish_reason; tokens = c.tokens; nfinish++; }
  }
  if (kind === 'chat' && role !== 'assistant') fail(`stream: first delta's role is ${role}`);
  if (nfinish !== 1) fail(`stream: ${nfinish} chunks with a finish_reason`);
  if (!usage) fail('stream: no usage chunk with include_usage');
  return { text, finish, tokens, usage, chunks: n, logprobs };
}

const chatBody = (text, extra) => ({ messages: [{ role: 'system', content: 'You are terse.' }, { role: 'user', content: text }], ...extra });
const long = Array.from({ length: 40 }, (_, i) => `word${i}`).join(' ');
const PROMPTS = [
  ['chat', chatBody('Hello there')],
  ['chat', chatBody('Hello there, how are you today?')],
  ['completion', { prompt: 'The quick brown fox' }],
  ['completion', { prompt: 'Once upon a time ' + long }],       // several prefill chunks
  ['chat', { messages: [{ role: 'user', content: 'Tell me a story' }, { role: 'assistant', content: 'Once' }, { role: 'user', content: 'more' }] }],
  ['completion', { prompt: [1, 2, 3, 4, 5, 6, 7, 8] }],
  ['chat', chatBody(long)],
  ['completion', { prompt: 'é中文🙂 bytes' }],
];

async function main() {
  if (process.env.TOOLS_ONLY) {                  // tests/cli_serve_tools.sh: a server with room for tools
    await toolChecks();
    console.log(`${failures} failures`);
    process.exit(failures ? 1 : 0);
  }
  // models
  const models = await client.models.list();
  if (models.data.length === 1 && models.data[0].id === MODEL && models.data[0].object === 'model') ok('models.list');
  else fail(`models.list: ${JSON.stringify(models.data)}`);

  // chat, plain and streamed: the same text, finish, tokens, usage
  const a = await ask('chat', chatBody('Hi', { max_tokens: 12, temperature: 0 }), false);
  if (a.raw.object !== 'chat.completion' || a.raw.choices[0].message.role !== 'assistant' || a.usage.completion_tokens !== a.tokens.length ||
      a.usage.total_tokens !== a.usage.prompt_tokens + a.usage.completion_tokens || !a.raw.id || typeof a.raw.created !== 'number')
    fail(`chat shape: ${JSON.stringify(a.raw)}`);
  else ok(`chat: ${a.tokens.length} tokens, finish ${a.finish}`);
  const b = await ask('chat', chatBody('Hi', { max_tokens: 12, temperature: 0 }), true);
  if (b.text === a.text && b.finish === a.finish && eq(b.tokens, a.tokens) && b.usage.completion_tokens === a.usage.completion_tokens)
    ok(`streamed chat = chat (${b.chunks} chunks)`);
  else fail(`streamed chat differs:\n  ${JSON.stringify(b)}\n  ${JSON.stringify(a)}`);

  // completions
  const c = await ask('completion', { prompt: 'The quick brown fox', max_tokens: 10, temperature: 0 }, false);
  if (c.raw.object !== 'text_completion' || typeof c.text !== 'string' || c.usage.completion_tokens !== 10 || c.finish !== 'length')
    fail(`completion shape: ${JSON.stringify(c.raw)}`);
  else ok('completion: 10 tokens, finish length');
  const d = await ask('completion', { prompt: 'The quick brown fox', max_tokens: 10, temperature: 0 }, true);
  if (d.text === c.text && eq(d.tokens, c.tokens)) ok('streamed completion = completion');
  else fail(`streamed completion differs: ${d.text} / ${c.text}`);

  // stop strings: the text up to the first occurrence, finish "stop", also streamed
  const cps = Array.from(c.text);
  const stop = cps.slice(Math.floor(cps.length / 2), Math.floor(cps.length / 2) + 2).join('');
  const want = c.text.slice(0, c.text.indexOf(stop));
  for (const stream of [false, true]) {
    const e = await ask('completion', { prompt: 'The quick brown fox', max_tokens: 10, temperature: 0, stop: [stop, 'zzzzzz'] }, stream);
    if (stop.length && e.text === want && e.finish === 'stop') ok(`stop ${JSON.stringify(stop)}${stream ? ' streamed' : ''}: cut at ${want.length}`);
    else fail(`stop ${JSON.stringify(stop)}: got ${JSON.stringify(e.text)} (${e.finish}), want ${JSON.stringify(want)}`);
  }

  // logprobs: one entry per generated token, the greedy token the best,
  // alternatives in decreasing order, probabilities that sum to at most 1;
  // streamed, the chunks' entries join into the non-streamed ones
  for (const [kind, body] of [['chat', chatBody('Hi', { logprobs: true, top_logprobs: 5 })], ['completion', { prompt: 'The quick brown fox', logprobs: 5 }]]) {
    const x = await ask(kind, { ...body, max_tokens: 12, temperature: 0 }, false);
    const y = await ask(kind, { ...body, max_tokens: 12, temperature: 0 }, true);
    const L = x.logprobs;
    const rows = kind === 'chat' ? L.content.map((e) => [e.logprob, e.top_logprobs.map((t) => t.logprob), e.bytes])
      : L.token_logprobs.map((lp, i) => [lp, Object.values(L.top_logprobs[i]), null]);
    let why = null;
    if (rows.length !== x.usage.completion_tokens) why = `${rows.length} entries for ${x.usage.completion_tokens} tokens`;
    rows.forEach(([lp, top], i) => {
      const sum = top.reduce((a, v) => a + Math.exp(v), 0);
      if (!why && (top.length !== 5 || lp !== top[0] || lp > 0 || sum > 1 + 1e-6 || top.some((v, j) => j && v > top[j - 1])))
        why = `token ${i}: logprob ${lp}, top ${JSON.stringify(top)}`;
    });
    if (!why && kind === 'chat' && x.finish === 'length' &&
        Buffer.from(L.content.flatMap((e) => e.bytes)).toString('utf8') !== x.text) why = 'the bytes do not join into the text';
    if (!why && !eq(y.logprobs, L)) why = `streamed logprobs differ:\n  ${JSON.stringify(y.logprobs)}\n  ${JSON.stringify(L)}`;
    if (why) fail(`${kind} logprobs: ${why}`);
    else ok(`${kind} logprobs: ${rows.length} tokens x 5 alternatives, the greedy token first, streamed = plain`);
  }

  // errors through the SDK
  const expectErr = async (label, status, param, fn) => {
    try { await fn(); fail(`${label}: no error`); } catch (err) {
      if (err.status === status && (param === undefined || err.param === param) && err.message) ok(`${label}: ${status} ${err.param ?? ''}`);
      else fail(`${label}: status ${err.status} param ${err.param}: ${err.message}`);
    }
  };
  await expectErr('n = 9', 400, 'n', () => client.chat.completions.create({ model: MODEL, n: 9, messages: [{ role: 'user', content: 'x' }] }));
  {
    // n = 2 with a seed: two choices, each the request alone with seed + i
    const body = { model: MODEL, messages: [{ role: 'user', content: 'Hello' }], max_tokens: 6, temperature: 1 };
    const two = await client.chat.completions.create({ ...body, n: 2, seed: 11 });
    const a = await client.chat.completions.create({ ...body, seed: 11 });
    const b = await client.chat.completions.create({ ...body, seed: 12 });
    if (two.choices.length === 2 && two.choices[1].index === 1 && two.choices[0].message.content === a.choices[0].message.content &&
        two.choices[1].message.content === b.choices[0].message.content)
      ok('n = 2: choice i = the request alone with seed + i');
    else fail(`n = 2: ${JSON.stringify(two.choices)} vs ${JSON.stringify([a.choices[0], b.choices[0]])}`);
    // streamed n = 3 through the SDK: the chunks of the three choices
    // interleave; joined per index, choice i is the plain n = 3 choice i
    const three = await client.chat.completions.create({ ...body, n: 3, seed: 11, return_tokens: true });
    const st = await client.chat.completions.create({ ...body, n: 3, seed: 11, return_tokens: true, stream: true,
                                                      stream_options: { include_usage: true } });
    const text = ['', '', ''], toks = [null, null, null], roles = [null, null, null];
    let usage = null, order = '';
    for await (const ch of st) {
      if (ch.usage) { usage = ch.usage; continue; }
      for (const c of ch.choices) {
        if (roles[c.index] === null) roles[c.index] = c.delta.role ?? '';
        text[c.index] += c.delta.content ?? '';
        if (c.finish_reason) toks[c.index] = c.tokens;
        order += c.index;
      }
    }
    const want = three.choices;
    if (want.every((c, i) => c.message.content === text[i] && eq(c.tokens, toks[i]) && roles[i] === 'assistant') &&
        usage?.completion_tokens === three.usage.completion_tokens &&
        want[1].message.content === b.choices[0].message.content)
      ok(`streamed n = 3: per index = the plain n = 3 choices (chunk order ${order})`);
    else fail(`streamed n = 3: ${JSON.stringify([text, toks, roles, usage])} vs ${JSON.stringify([want, three.usage])}`);
  }
  await expectErr('unknown model', 404, 'model', () => client.chat.completions.create({ model: 'gpt-9', messages: [{ role: 'user', content: 'x' }] }));
  await expectErr('wrong key', 401, undefined, () => new OpenAI({ baseURL: BASE, apiKey: 'wrong', maxRetries: 0 }).models.list());

  // exactness: alone (sequential, non-streamed) vs 8 concurrent, streamed or not
  for (const [label, sampling] of [['greedy', { temperature: 0 }], ['seeded', { temperature: 0.9, top_p: 0.95, top_k: 40 }]]) {
    const lp = (i) => (PROMPTS[i][0] === 'chat' ? { logprobs: true, top_logprobs: 3 } : { logprobs: 3 });
    // every other request with llama.cpp's repeat penalty (its window starts with the prompt)
    const rp = (i) => (i % 2 ? { repeat_penalty: 1.3, repeat_last_n: i === 3 ? -1 : 8 } : {});
    const body = (i) => ({ ...PROMPTS[i][1], max_tokens: 16, ...sampling, ...(label === 'seeded' ? { seed: 1000 + i } : {}), ...lp(i), ...rp(i) });
    const alone = [];
    // alone: one at a time, each a cold prefill (cache_prompt: false, as in llama.cpp's server)
    for (let i = 0; i < PROMPTS.length; i++) alone.push(await ask(PROMPTS[i][0], { ...body(i), cache_prompt: false }, false));
    if (alone.some((x) => x.usage.prompt_tokens_details.cached_tokens !== 0)) fail('cache_prompt: false still used the cache');
    for (const round of [0, 1]) {
      const together = await Promise.all(PROMPTS.map((p, i) => ask(p[0], body(i), (i + round) % 2 === 0)));
      let bad = 0, hits = 0;
      together.forEach((t, i) => {
        hits += t.usage.prompt_tokens_details.cached_tokens > 0;
        if (!eq(t.tokens, alone[i].tokens) || t.text !== alone[i].text || t.finish !== alone[i].finish || !eq(t.logprobs, alone[i].logprobs)) {
          bad++;
          fail(`${label} round ${round} prompt ${i}: ${JSON.stringify(t.tokens)} vs alone ${JSON.stringify(alone[i].tokens)}`);
        }
      });
      if (!bad) ok(`${label} round ${round}: 8 concurrent requests = alone cold, tokens and logprobs (${hits} prompt-cache hits)`);
      if (round === 1 && hits < 4) fail(`${label} round 1: only ${hits} prompt-cache hits`);
    }
  }
  // a repeated request is a full cache hit and still the same
  const r1 = await ask('completion', { prompt: 'Once upon a time ' + long, max_tokens: 8, temperature: 0 }, false);
  const r2 = await ask('completion', { prompt: 'Once upon a time ' + long, max_tokens: 8, temperature: 0 }, false);
  if (r2.usage.prompt_tokens_details.cached_tokens === r2.usage.prompt_tokens - 1 && eq(r1.tokens, r2.tokens)) ok('full prompt-cache hit: same tokens');
  else fail(`cache hit: cached ${r2.usage.prompt_tokens_details.cached_tokens} of ${r2.usage.prompt_tokens}`);

  console.log(`${failures} failures`);
  process.exit(failures ? 1 : 0);
}

// Tool calls through the SDK (docs/SERVE.md "Tool calls"): a required call
// parsed by the SDK, the SDK's own stream helper reassembling the streamed
// call to the same one, and the call sent back with its result.
async function toolChecks() {
  const tools = [{ type: 'function', function: { name: 'get_weather', description: 'Weather in a city',
    parameters: { type: 'object', properties: { city: { type: 'string', maxLength: 10 }, days: { type: 'integer', minimum: 1, maximum: 7 } },
                  required: ['city', 'days'] } } }];
  const body = { model: MODEL, messages: [{ role: 'user', content: 'Weather in Paris?' }], tools, tool_choice: 'required',
                 temperature: 0, max_tokens: 120 };
  const r = await client.chat.completions.create(body);
  const c = r.choices[0], calls = c.message.tool_calls ?? [];
  const valid = (tc) => { const a = JSON.parse(tc.function.arguments);
    return tc.type === 'function' && tc.function.name === 'get_weather' && typeof a.city === 'string' && a.city.length <= 10 &&
           Number.isInteger(a.days) && a.days >= 1 && a.days <= 7 && Object.keys(a).every((k) => k === 'city' || k === 'days'); };
  if (c.finish_reason === 'tool_calls' && calls.length >= 1 && calls.every(valid)) ok(`tools: required gives ${calls.length} valid call(s)`);
  else fail(`tools: required: ${JSON.stringify(c)}`);
  const st = client.chat.completions.stream(body);
  const fin = await st.finalChatCompletion();
  const sc = fin.choices[0].message.tool_calls ?? [];
  const key = (l) => JSON.stringify(l.map((t) => [t.id.length > 0, t.function.name, t.function.arguments]));
  if (fin.choices[0].finish_reason === 'tool_calls' && key(sc) === key(calls)) ok('tools: the SDK reassembles the streamed call to the same call');
  else fail(`tools: streamed ${JSON.stringify(fin.choices[0])} != ${JSON.stringify(c)}`);
  const next = await client.chat.completions.create({ ...body, tool_choice: 'auto', max_tokens: 8,
    messages: [...body.messages, c.message, ...calls.map((t) => ({ role: 'tool', tool_call_id: t.id, content: 'sunny' }))] });
  if (typeof next.choices[0].message.content === 'string') ok('tools: the call and its result sent back');
  else fail(`tools: next turn ${JSON.stringify(next.choices[0])}`);
}

main().catch((e) => { console.log(`FAIL: ${e.stack || e}`); process.exit(1); });
