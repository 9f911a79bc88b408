// load.mjs — the load generator of the serve benchmark (bench/serve.sh runs
// it; timing only, never a test). C clients, each sending N streamed
// completions one after another through the official openai SDK (installed
// under tests/serve by the test setup), every prompt distinct so that no
// request is a prompt-cache hit. Prints one JSON object:
//   requests, tokens (usage.completion_tokens), wall seconds, aggregate
//   tokens/s, time to first token p50/p99 (first text chunk), per-request
//   decode tokens/s p50 ((tokens - 1) / (last chunk - first chunk)), and the
//   CPU seconds this process used (it shares the cores with the server).
// Environment: BASE, MODEL, C, N, MAXTOK, WORDS (prompt words), SEED.
import { createRequire } from 'node:module';

const require = createRequire(new URL('../../tests/serve/package.json', import.meta.url));
const OpenAI = require('openai').default ?? require('openai');
const env = process.env;
const C = +env.C || 1, N = +env.N || 2, MAXTOK = +env.MAXTOK || 64, WORDS = +env.WORDS || 48, SEED = +env.SEED || 1;
const client = new OpenAI({ baseURL: env.BASE, apiKey: 'bench', maxRetries: 0, timeout: 600000 });

// a distinct prompt per (seed, client, request): words from a fixed LCG
function prompt(c, i) {
  let x = (SEED * 7919 + c * 104729 + i * 1299709) >>> 0;
  const w = [];
  for (let k = 0; k < WORDS; k++) { x = (Math.imul(x, 1103515245) + 12345) >>> 0; w.push(`w${(x >>> 8) % 5000}`); }
  return w.join(' ');
}

async function one(c, i) {
  const t0 = performance.now();
  let first = null, last = null, tokens = 0;
  const s = await client.completions.create({
    model: env.MODEL, prompt: prompt(c, i), max_tokens: MAXTOK, temperature: 0, stream: true,
    stream_options: { include_usage: true }, cache_prompt: false,
  });
  for await (const ch of s) {
    if (ch.usage) { tokens = ch.usage.completion_tokens; continue; }
    const now = performance.now();
    if (ch.choices[0]?.text) { if (first === null) first = now; last = now; }
  }
  return { ttft: ((first ?? performance.now()) - t0) / 1000, tokens, decode: first !== null && last > first ? (tokens - 1) / ((last - first) / 1000) : null };
}

const pct = (a, p) => { const s = [...a].sort((x, y) => x - y); return s.length ? s[Math.min(s.length - 1, Math.ceil(p * s.length) - 1)] : null; };
const t0 = performance.now(), cpu0 = process.cpuUsage();
const res = (await Promise.all(Array.from({ length: C }, async (_, c) => {
  const out = [];
  for (let i = 0; i < N; i++) out.push(await one(c, i));
  return out;
}))).flat();
const wall = (performance.now() - t0) / 1000;
const tokens = res.reduce((a, r) => a + r.tokens, 0);
console.log(JSON.stringify({
  concurrency: C, requests: res.length, tokens, wall_seconds: wall, tokens_per_second: tokens / wall,
  ttft_p50: pct(res.map((r) => r.ttft), 0.5), ttft_p99: pct(res.map((r) => r.ttft), 0.99),
  request_decode_tps_p50: pct(res.filter((r) => r.decode).map((r) => r.decode), 0.5),
  client_cpu_seconds: ((u) => (u.user + u.system) / 1e6)(process.cpuUsage(cpu0)),
}));
