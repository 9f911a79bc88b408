#!/bin/sh
# cli_bench.sh — `moefast bench`: argument errors exit 2 with one line, the
# JSON schema moefast.bench/1 has every documented field with sane values
# (never timing thresholds), windows and lengths are honoured, and the token
# check passes on a matching golden trace and fails (exit 1, naming the step)
# on a tampered one. --ab (in-process A/B of the decode steps): the ab object
# is sane, the token check runs on both configurations and names the one that
# failed, and flags that cannot change on a live session are refused.
# --phases (phase profile of the last repeat): the text tables and the JSON
# phases object (every phase that ran has calls and time, shares sum to at
# most 1, the per-layer phases run as often as each other), refused with --ab.
BIN=${MOEFAST_BIN:-build/asan/moefast}
. tests/lib.sh
d=$(mktemp -d /tmp/moefast-cli-bench-XXXXXX) || exit 1
trap 'rm -rf "$d"' EXIT
fail=0
bad() { echo "FAIL: $*" >&2; fail=1; }
M=$(tiny_f32 "$d") && [ -f "$M" ] || { echo "FAIL: no qwen3moe-tiny F32 model" >&2; exit 1; }

. scripts/jget.sh

expect_err() {
  "$BIN" "$@" >"$d/out" 2>"$d/err"; rc=$?
  [ $rc -eq 2 ] || bad "'$*' exited $rc, expected 2"
  [ "$(wc -l <"$d/err")" -eq 1 ] || bad "'$*' printed $(wc -l <"$d/err") stderr lines: $(cat "$d/err")"
  grep -q "^moefast bench: " "$d/err" || bad "'$*' message lacks 'moefast bench: ': $(cat "$d/err")"
}
expect_msg() { grep -q -- "$1" "$d/err" || bad "message lacks '$1': $(cat "$d/err")"; }

# ---- errors
expect_err bench; expect_msg "-m"
expect_err bench -m "$d/missing.gguf"; expect_msg "missing.gguf"
expect_err bench -m "$M" --window sideways; expect_msg "sideways"
expect_err bench -m "$M" -t 0; expect_msg "-t"
expect_err bench -m "$M" --prompt-len x; expect_msg "prompt-len"
expect_err bench -m "$M" --decode-steps 0; expect_msg "decode-steps"
expect_err bench -m "$M" --repeat; expect_msg "repeat"
expect_err bench -m "$M" --bogus; expect_msg "bogus"
expect_err bench -m "$M" --trace "$d/missing.json"; expect_msg "missing.json"
expect_err bench -m "$M" --flags +no_such_flag --prompt-len 4 --decode-steps 2; expect_msg "no_such_flag"
expect_err bench -m "$M" --flags=+no_such_flag --prompt-len 4 --decode-steps 2; expect_msg "no_such_flag"
# --ab: an unknown flag, flags fixed at load or session creation, nothing to alternate
expect_err bench -m "$M" --prompt-len 4 --decode-steps 4 --ab +nosuchflag; expect_msg "nosuchflag"
expect_err bench -m "$M" --prompt-len 4 --decode-steps 4 --ab -repack; expect_msg "'repack'"
expect_err bench -m "$M" --prompt-len 4 --decode-steps 4 --ab -threads; expect_msg "'threads'"
expect_err bench -m "$M" --prompt-len 4 --decode-steps 4 --flags +act_q8 --ab=-act_q8; expect_msg "'act_q8'"
# (a KV cache format runs B on a sibling session, which still refuses load-time flags)
expect_err bench -m "$M" --prompt-len 4 --decode-steps 4 --ab +kv_f16,-repack; expect_msg "'repack'"
expect_err bench -m "$M" --prompt-len 4 --decode-steps 4 --ab-sibling; expect_msg "--ab-sibling"
expect_err bench -m "$M" --prompt-len 4 --decode-steps 4 --ab -simd --window prefill; expect_msg "prefill"
expect_err bench -m "$M" --prompt-len 4 --decode-steps 1 --ab -simd; expect_msg "2 decode steps"
expect_err bench -m "$M" --ab; expect_msg "--ab"
expect_err bench -m "$M" --prompt-len 4 --decode-steps 4 --phases --ab -simd; expect_msg "--phases"
"$BIN" bench --help >"$d/out" 2>&1 || bad "bench --help failed"
grep -q "prompt-len" "$d/out" || bad "bench --help does not mention --prompt-len"

# ---- JSON, both windows, two repeats, no bandwidth
B="$BIN bench -m $M -t 2 --prompt-len 16 --decode-steps 8"
$B --json --repeat 2 --no-bandwidth >"$d/b.json" 2>"$d/err" || bad "bench --json failed: $(cat "$d/err")"
j=$d/b.json
is_val $j schema '"moefast.bench/1"'
is_val $j model.arch '"qwen3moe"'
is_val $j model.n_vocab 1000
num_ok $j model.bytes_per_token "v > 0 && v < 20000000"
is_val $j config.threads 2
is_val $j config.window '"both"'
is_val $j config.prompt_len 16
is_val $j config.decode_steps 8
is_val $j config.repeat 2
is_val $j config.prompt_source '"random"'
is_val $j config.trace null
is_val $j config.note null
[ -n "$(jget $j config.flags)" ] || bad "config.flags missing"
[ -n "$(jget $j config.isa)" ] || bad "config.isa missing"
num_ok $j load_seconds "v >= 0"
num_ok $j peak_rss_bytes "v > 1000000"
is_val $j prefill.tokens 16
num_ok $j prefill.seconds "v > 0"
num_ok $j prefill.seconds_per_token "v > 0"
# internal consistency (not timing): tokens/s x seconds/token = 1, s/tok = s / P
p_s=$(jget $j prefill.seconds); p_spt=$(jget $j prefill.seconds_per_token); p_tps=$(jget $j prefill.tokens_per_second)
awk -v a="$p_s" -v b="$p_spt" -v c="$p_tps" 'BEGIN { exit !(b * 16 / a > 0.999 && b * 16 / a < 1.001 && b * c > 0.999 && b * c < 1.001) }' ||
  bad "prefill figures inconsistent: seconds $p_s, s/tok $p_spt, tok/s $p_tps"
num_ok $j prefill.runs_seconds[1] "v > 0"
[ -z "$(jget $j prefill.runs_seconds[2])" ] || bad "prefill.runs_seconds has more than 2 entries"
is_val $j decode.seed_tokens 16
is_val $j decode.steps 8
num_ok $j decode.seconds_per_token "v > 0"
num_ok $j decode.seed_seconds "v > 0"
num_ok $j decode.steps_seconds "v > 0"
num_ok $j decode.steps_tokens_per_second "v > 0"
num_ok $j decode.achieved_gb_per_second "v > 0"
d_s=$(jget $j decode.seconds); d_spt=$(jget $j decode.seconds_per_token); st_s=$(jget $j decode.steps_seconds)
awk -v a="$d_s" -v b="$d_spt" -v c="$st_s" 'BEGIN { exit !(b * 8 / a > 0.999 && b * 8 / a < 1.001 && c < a) }' ||
  bad "decode figures inconsistent: seconds $d_s, s/tok $d_spt, steps $st_s"
is_val $j decode.bandwidth_gb_per_second null
is_val $j decode.pct_of_bandwidth_limit null
is_val $j decode.pct_of_bandwidth_limit_with_kv null
is_val $j decode.compute_ceiling null
is_val $j decode.pct_of_roofline null
num_ok $j decode.kv_bytes_per_token "v > 0"
num_ok $j decode.runs_seconds[1] "v > 0"
is_val $j token_check null
is_val $j ab null
is_val $j phases null

# ---- one window only; the bandwidth measurement
$B --json --window prefill --no-bandwidth >"$d/p.json" 2>"$d/err" || bad "--window prefill failed: $(cat "$d/err")"
is_val $d/p.json decode null
is_val $d/p.json config.window '"prefill"'
# (the 512 MB bandwidth pass runs from the release binary when there is one:
# under the sanitizer its page faults alone take seconds)
RB=$BIN; [ -x "${MOEFAST_BIN_REL:-build/rel/moefast}" ] && RB=${MOEFAST_BIN_REL:-build/rel/moefast}
"$RB" bench -m "$M" -t 2 --prompt-len 16 --decode-steps 8 --json --window decode --repeat 2 >"$d/d.json" 2>"$d/err" ||
  bad "--window decode failed: $(cat "$d/err")"
is_val $d/d.json prefill null
num_ok $d/d.json decode.bandwidth_gb_per_second "v > 0"
num_ok $d/d.json decode.pct_of_bandwidth_limit "v > 0"
# two bandwidth measurements per decode window (right before, right after);
# the window's bandwidth is their mean, steady when they agree within 15 %
# (the arithmetic itself: tests/test_stats.c)
for i in 0 1; do
  num_ok $d/d.json "decode.bandwidth_before_runs_gb_per_second[$i]" "v > 0"
  num_ok $d/d.json "decode.bandwidth_after_runs_gb_per_second[$i]" "v > 0"
  bb=$(jget $d/d.json "decode.bandwidth_before_runs_gb_per_second[$i]"); ba=$(jget $d/d.json "decode.bandwidth_after_runs_gb_per_second[$i]")
  bw=$(jget $d/d.json "decode.bandwidth_runs_gb_per_second[$i]"); sti=$(jget $d/d.json "decode.bandwidth_steady_runs[$i]")
  awk -v a="$bb" -v b="$ba" -v w="$bw" -v s="$sti" 'BEGIN { d = (a + b) / 2 - w; r = a > b ? a / b : b / a
    exit !(d < 1e-6 && d > -1e-6 && (s == "true") == (r <= 1.15)) }' ||
    bad "window $i: bandwidth $bw / steady $sti do not follow from $bb before and $ba after"
done
[ -z "$(jget $d/d.json 'decode.bandwidth_runs_gb_per_second[2]')" ] || bad "more bandwidth runs than repeats"
b0=$(jget $d/d.json 'decode.bandwidth_runs_gb_per_second[0]'); b1=$(jget $d/d.json 'decode.bandwidth_runs_gb_per_second[1]')
p0=$(jget $d/d.json 'decode.pct_runs[0]'); p1=$(jget $d/d.json 'decode.pct_runs[1]')
s0=$(jget $d/d.json 'decode.bandwidth_steady_runs[0]'); s1=$(jget $d/d.json 'decode.bandwidth_steady_runs[1]')
ns=$(jget $d/d.json decode.pct_steady_windows)
pm=$(jget $d/d.json decode.pct_of_bandwidth_limit); bm=$(jget $d/d.json decode.bandwidth_gb_per_second)
# the summary: the median over the steady windows, or over both when neither is
awk -v a="$p0" -v b="$p1" -v x="$b0" -v y="$b1" -v s="$s0" -v t="$s1" -v n="$ns" -v m="$pm" -v w="$bm" 'BEGIN {
    if (s == "true" && t != "true") { ep = a; eb = x } else if (t == "true" && s != "true") { ep = b; eb = y }
    else { ep = (a + b) / 2; eb = (x + y) / 2 }
    exit !(a > 0 && b > 0 && n == (s == "true") + (t == "true") && ep - m < 1e-6 && m - ep < 1e-6 &&
           eb - w < 1e-6 && w - eb < 1e-6) }' ||
  bad "pct_of_bandwidth_limit $pm / bandwidth $bm do not follow from the windows ($p0, $p1; $b0, $b1; steady $s0, $s1; $ns)"
# the limit counting the KV cache: the same figure scaled by (weights + KV) / weights
pk=$(jget $d/d.json decode.pct_of_bandwidth_limit_with_kv); kv=$(jget $d/d.json decode.kv_bytes_per_token)
bp=$(jget $d/d.json decode.bytes_per_token)
awk -v m="$pm" -v k="$pk" -v kv="$kv" -v b="$bp" 'BEGIN { e = m * (b + kv) / b; exit !(kv > 0 && k > m && (k - e) / e < 1e-6 && (e - k) / e < 1e-6) }' ||
  bad "pct_of_bandwidth_limit_with_kv $pk does not follow from $pm, KV $kv and weights $bp bytes per token"
"$RB" bench -m "$M" -t 2 --prompt-len 16 --decode-steps 8 --window decode --repeat 2 >"$d/dt.txt" 2>"$d/err" ||
  bad "--window decode (text) failed: $(cat "$d/err")"
grep -q "bandwidth limit .* % (median over the [0-2] of 2 repeats" "$d/dt.txt" || bad "text report lacks the per-window bandwidth line: $(cat "$d/dt.txt")"
grep -q "KV cache per token .* MB" "$d/dt.txt" || bad "text report lacks the KV bytes line: $(cat "$d/dt.txt")"
grep -q "limit with KV .* %" "$d/dt.txt" || bad "text report lacks the limit with KV: $(cat "$d/dt.txt")"
grep -q "compute ceiling .* tok/s" "$d/dt.txt" || bad "text report lacks the compute ceiling: $(cat "$d/dt.txt")"
grep -q "^    F32.*rows of .* MB/token at .* GB/s from cache" "$d/dt.txt" || bad "text report lacks the ceiling's kernels: $(cat "$d/dt.txt")"
grep -q "roofline .* % (the steps against the roofline" "$d/dt.txt" || bad "text report lacks the roofline: $(cat "$d/dt.txt")"
# the compute ceiling (its arithmetic: tests/test_profile.c): measured after
# each window, its kernels with rates, 1 / its seconds; the roofline is never
# above the bandwidth limit, so the steps are at least as large a share of it
num_ok $d/d.json decode.compute_ceiling.runs_seconds_per_token[0] "v > 0"
num_ok $d/d.json decode.compute_ceiling.runs_seconds_per_token[1] "v > 0"
num_ok $d/d.json decode.compute_ceiling.kernels[0].bytes_per_token "v > 0"
# per window: the roofline share is never below the bandwidth limit's
for i in 0 1; do
  rr=$(jget $d/d.json "decode.pct_of_roofline_runs[$i]"); pp=$(jget $d/d.json "decode.pct_runs[$i]")
  awk -v r="$rr" -v p="$pp" 'BEGIN { exit !(r > 0 && r >= p * (1 - 1e-6)) }' || bad "window $i: roofline $rr % against the limit's $pp %"
done
num_ok $d/d.json decode.compute_ceiling.kernels[0].gb_per_second "v > 0"
# attention's items from cache join the roofline: timed, named by the cache
# format, their bytes the step's mean KV bytes; so per window the roofline
# share is at least the weights' roofline's and the limit with KV's
num_ok $d/d.json decode.compute_ceiling.attention.gb_per_second "v > 0"
jget $d/d.json decode.compute_ceiling.attention.kernel | grep -q '^"attention, F32 cache, [0-9]* keys"$' ||
  bad "attention kernel: $(jget $d/d.json decode.compute_ceiling.attention.kernel)"
ab=$(jget $d/d.json decode.compute_ceiling.attention.bytes_per_token); kb=$(jget $d/d.json decode.kv_bytes_per_token)
awk -v a="$ab" -v k="$kb" 'BEGIN { exit !(k > 0 && (a - k) / k < 1e-9 && (k - a) / k < 1e-9) }' ||
  bad "attention part $ab bytes, the steps' KV $kb"
wb=$(jget $d/d.json decode.bytes_per_token)
for i in 0 1; do
  rr=$(jget $d/d.json "decode.pct_of_roofline_runs[$i]"); rw=$(jget $d/d.json "decode.pct_of_weights_roofline_runs[$i]")
  pp=$(jget $d/d.json "decode.pct_runs[$i]")
  awk -v r="$rr" -v w="$rw" -v p="$pp" -v k="$kb" -v b="$wb" 'BEGIN {
      exit !(w > 0 && r >= w * (1 - 1e-6) && r >= p * (b + k) / b * (1 - 1e-6)) }' ||
    bad "window $i: roofline $rr %, weights only $rw %, limit $pp % (with KV: x ($wb + $kb) / $wb)"
done
grep -q "^    attention, F32 cache, .* MB/token at .* GB/s from cache" "$d/dt.txt" ||
  bad "text report lacks the attention kernel: $(cat "$d/dt.txt")"
grep -q "the weights' kernels alone: .* %" "$d/dt.txt" || bad "text report lacks the weights' roofline: $(cat "$d/dt.txt")"
jget $d/d.json decode.compute_ceiling.kernels[0].kernel | grep -q "^\"F32" || bad "first ceiling kernel: $(jget $d/d.json decode.compute_ceiling.kernels[0].kernel)"
cs=$(jget $d/d.json decode.compute_ceiling.seconds_per_token); ct=$(jget $d/d.json decode.compute_ceiling.tokens_per_second)
rt=$(jget $d/d.json decode.roofline_tokens_per_second); pr=$(jget $d/d.json decode.pct_of_roofline)
awk -v s="$cs" -v t="$ct" -v r="$rt" -v p="$pr" -v m="$pm" -v w="$bm" -v b="$bp" 'BEGIN {
    e = 1 / s; exit !(s > 0 && (t - e) / e < 1e-6 && (e - t) / e < 1e-6 && r > 0 && r <= w * 1e9 / b * (1 + 1e-6) &&
                      p >= m * (1 - 1e-6)) }' ||
  bad "ceiling $cs s ($ct tok/s), roofline $rt tok/s at $pr % against bandwidth $bm GB/s, $bp bytes, $pm %"

# ---- human-readable report
$B --no-bandwidth >"$d/h.txt" 2>"$d/err" || bad "text report failed: $(cat "$d/err")"
for w in "prefill" "decode steps alone" "weights per token" "peak RSS" "token check"; do
  grep -q "$w" "$d/h.txt" || bad "text report lacks '$w'"
done

# ---- --phases: both windows profiled (the last of two repeats)
# phase_get FILE WINDOW NAME FIELD: FIELD of the entry named NAME (empty: none)
phase_get() {
  k=0
  while :; do
    nm=$(jget "$1" "phases.$2.entries[$k].name"); [ -n "$nm" ] || return 0
    if [ "$nm" = "\"$3\"" ]; then jget "$1" "phases.$2.entries[$k].$4"; return 0; fi
    k=$((k+1))
  done
}
$B --json --no-bandwidth --repeat 2 --phases >"$d/ph.json" 2>"$d/err" || bad "bench --phases --json failed: $(cat "$d/err")"
j=$d/ph.json
is_val $j phases.profiled_repeat 2
is_val $j phases.decode.steps 8
is_val $j phases.decode.tokens 8
is_val $j phases.prefill.steps 1
is_val $j phases.prefill.tokens 16
for w in decode prefill; do
  num_ok $j phases.$w.measured_ms_per_step "v > 0"
  num_ok $j phases.$w.phases_ms_per_step "v > 0"
  m_ms=$(jget $j phases.$w.measured_ms_per_step); p_ms=$(jget $j phases.$w.phases_ms_per_step)
  o_ms=$(jget $j phases.$w.outside_ms_per_step)
  awk -v m="$m_ms" -v p="$p_ms" -v o="$o_ms" 'BEGIN { exit !(p <= m && (p + o) / m > 0.999999 && (p + o) / m < 1.000001) }' ||
    bad "phases.$w: phases $p_ms + outside $o_ms ms is not the measured $m_ms ms (or exceeds it)"
  i=0; share=0; names=""
  while :; do
    n=$(jget $j "phases.$w.entries[$i].name"); [ -n "$n" ] || break
    names="$names $n"
    num_ok $j "phases.$w.entries[$i].calls_per_step" "v > 0"
    num_ok $j "phases.$w.entries[$i].ms_per_step" "v > 0"
    num_ok $j "phases.$w.entries[$i].share" "v > 0 && v <= 1"
    num_ok $j "phases.$w.entries[$i].weight_mb_per_step" "v >= 0"
    num_ok $j "phases.$w.entries[$i].kv_mb_per_step" "v >= 0"
    share=$(awk -v a="$share" -v b="$(jget $j "phases.$w.entries[$i].share")" 'BEGIN { printf "%.9f", a + b }')
    i=$((i+1))
  done
  awk -v s="$share" 'BEGIN { exit !(s > 0 && s <= 1.000001) }' || bad "phases.$w: shares sum to $share"
  for p in embed attn_norm qkv attention wo ffn_norm router route gate_up down combine lm_head; do
    echo "$names" | grep -q "\"$p\"" || bad "phases.$w lacks $p:$names"
  done
  # one of each per-layer phase per layer; one embed and lm head per forward
  nl=$(phase_get $j $w attn_norm calls_per_step)
  for p in qkv attention wo ffn_norm router route gate_up down combine; do
    [ "$(phase_get $j $w $p calls_per_step)" = "$nl" ] || bad "phases.$w: $p calls $(phase_get $j $w $p calls_per_step), attn_norm $nl"
  done
  num_ok $j phases.$w.entries[0].calls_per_step "v == 1"
  [ "$(phase_get $j $w lm_head calls_per_step)" = "$(jget $j phases.$w.entries[0].calls_per_step)" ] || bad "phases.$w: lm_head calls"
  v=$(phase_get $j $w qkv gb_per_s); awk -v v="$v" 'BEGIN { exit !(v > 0) }' || bad "phases.$w: qkv gb_per_s '$v'"
  v=$(phase_get $j $w attention kv_gb_per_s); awk -v v="$v" 'BEGIN { exit !(v > 0) }' || bad "phases.$w: attention kv_gb_per_s '$v'"
  v=$(phase_get $j $w lm_head weight_mb_per_step); awk -v v="$v" 'BEGIN { exit !(v > 0) }' || bad "phases.$w: lm_head MB '$v'"
  [ "$(phase_get $j $w route gb_per_s)" = null ] || bad "phases.$w: route has a weight GB/s"
done
# a decode step's weight MB add up to the model's bytes per token
wsum=0; i=0
while [ -n "$(jget $j "phases.decode.entries[$i].name")" ]; do
  wsum=$(awk -v a="$wsum" -v b="$(jget $j "phases.decode.entries[$i].weight_mb_per_step")" 'BEGIN { printf "%.9f", a + b }')
  i=$((i+1))
done
bpt=$(jget $j model.bytes_per_token)
awk -v w="$wsum" -v b="$bpt" 'BEGIN { exit !(w * 1e6 / b > 0.999999 && w * 1e6 / b < 1.000001) }' ||
  bad "phases.decode weight MB sum to $wsum, bytes_per_token is $bpt"
# the decode steps stream each matrix once per step: qkv MB per step is the
# prefill's (one forward) too
[ "$(phase_get $j decode qkv weight_mb_per_step)" = "$(phase_get $j prefill qkv weight_mb_per_step)" ] ||
  bad "qkv MB per decode step $(phase_get $j decode qkv weight_mb_per_step) != per prefill $(phase_get $j prefill qkv weight_mb_per_step)"
# one window only: the other is null
$B --json --no-bandwidth --window prefill --phases >"$d/php.json" 2>"$d/err" || bad "--phases --window prefill failed: $(cat "$d/err")"
is_val $d/php.json phases.decode null
is_val $d/php.json phases.profiled_repeat 1
[ "$(jget $d/php.json phases.prefill.entries[0].name)" = '"embed"' ] || bad "--window prefill --phases: no prefill table"
# text: a table per window, the sum line, the repeat note
$B --no-bandwidth --repeat 2 --phases >"$d/ph.txt" 2>"$d/err" || bad "bench --phases (text) failed: $(cat "$d/err")"
for w in "phase profile, prefill window" "phase profile, decode: the 8 steps" "the last repeat only" "sum of phases" \
         " qkv " " lm_head " " attention " "KV GB/s"; do
  grep -q -- "$w" "$d/ph.txt" || bad "--phases text lacks '$w'"
done
[ "$(grep -c "sum of phases" "$d/ph.txt")" -eq 2 ] || bad "--phases text: expected two tables"

# ---- token check against a golden trace (needs `moefast trace record`)
if "$BIN" trace record -m "$M" --tokens 5,17,300,42,7,999,0,123,55,66,77,88,99,100,200,250 --steps 9 \
     -o "$d/t.json" >"$d/out" 2>"$d/err"; then
  $B --json --no-bandwidth --trace "$d/t.json" >"$d/tc.json" 2>"$d/err"; rc=$?
  [ $rc -eq 0 ] || bad "bench --trace (matching) exited $rc: $(cat "$d/err")"
  is_val $d/tc.json token_check.ok true
  is_val $d/tc.json token_check.first_mismatch_step -1
  is_val $d/tc.json token_check.checked 10   # prefill step 0 + decode steps 0..8
  is_val $d/tc.json config.prompt_source '"trace"'
  # a trace shorter than asked: its lengths are used and the note says so
  "$BIN" bench -m "$M" -t 2 --json --no-bandwidth --trace "$d/t.json" >"$d/tn.json" 2>"$d/err" ||
    bad "bench --trace with default lengths failed: $(cat "$d/err")"
  is_val $d/tn.json config.prompt_len 16
  is_val $d/tn.json config.decode_steps 9
  jget $d/tn.json config.note | grep -q "16-token prompt" || bad "config.note does not explain the lengths"
  # tamper with step S: swap the top two ids (logits stay sorted) and make the
  # second one the expected token; the model's argmax is then the first.
  S=4
  trace_tamper "$d/t.json" $S "$d/bad.json"
  $B --json --no-bandwidth --trace "$d/bad.json" >"$d/tb.json" 2>"$d/err"; rc=$?
  [ $rc -eq 1 ] || bad "bench --trace (tampered at step $S) exited $rc, expected 1: $(cat "$d/err")"
  is_val $d/tb.json token_check.ok false
  is_val $d/tb.json token_check.first_mismatch_step $S
  is_val $d/tb.json token_check.window '"decode"'
  exp=$(grep '"expected_tokens"' "$d/bad.json" | tr -d '[],' | awk -v S=$S '{ print $(S + 2) }')
  is_val $d/tb.json token_check.expected "$exp"
  is_val $d/tb.json token_check.config null

  # ---- --ab: 64 steps = 32 (A, B) pairs, every step checked against the trace
  "$BIN" trace record -m "$M" --tokens 5,17,300,42,7,999,0,123,55,66,77,88,99,100,200,250 --steps 65 \
    -o "$d/t65.json" >"$d/out" 2>"$d/err" || bad "trace record --steps 65 failed: $(cat "$d/err")"
  AB="$BIN bench -m $M -t 2 --no-bandwidth --window decode --decode-steps 64 --trace $d/t65.json"
  $AB --json --ab -parallel_glue >"$d/ab.json" 2>"$d/err" || bad "bench --ab -parallel_glue failed: $(cat "$d/err")"
  j=$d/ab.json
  is_val $j token_check.ok true
  is_val $j token_check.checked 65   # the seed's step 0 + 64 steps, A and B alike
  is_val $j token_check.config null
  is_val $j ab.spec '"-parallel_glue"'
  jget $j ab.a_flags | grep -q "+parallel_glue" || bad "ab.a_flags lacks +parallel_glue: $(jget $j ab.a_flags)"
  jget $j ab.b_flags | grep -q "parallel_glue" && bad "ab.b_flags still has parallel_glue: $(jget $j ab.b_flags)"
  [ "$(jget $j ab.a_flags)" = "\"$(jget $j config.flags | tr -d '"')\"" ] || bad "ab.a_flags is not config.flags"
  is_val $j ab.pairs 32
  is_val $j ab.resamples 2000
  is_val $j ab.seed 20260101
  num_ok $j ab.a_median_s "v > 0"
  num_ok $j ab.b_median_s "v > 0"
  a_m=$(jget $j ab.a_median_s); b_m=$(jget $j ab.b_median_s); sp=$(jget $j ab.speedup)
  lo=$(jget $j ab.lo); hi=$(jget $j ab.hi); a_t=$(jget $j ab.a_tokens_per_second)
  awk -v a="$a_m" -v b="$b_m" -v s="$sp" -v l="$lo" -v h="$hi" -v t="$a_t" 'BEGIN {
    exit !(s > 0 && l > 0 && l <= s && s <= h && s / (a / b) > 0.999999 && s / (a / b) < 1.000001 &&
           a * t > 0.999999 && a * t < 1.000001) }' ||
    bad "ab figures insane: A $a_m, B $b_m, speedup $sp [$lo, $hi], A tok/s $a_t"
  # text: the block after the decode lines; an empty SPEC is the A/A control
  $AB --ab '' >"$d/ab.txt" 2>"$d/err" || bad "bench --ab '' failed: $(cat "$d/err")"
  for w in "in-process A/B" "A/A control" "speedup A/B" "token check          ok"; do
    grep -q "$w" "$d/ab.txt" || bad "--ab text report lacks '$w'"
  done
  # the token check names the configuration: step 4 follows input 3, an odd (B) step
  trace_tamper "$d/t65.json" 4 "$d/bad65.json"
  "$BIN" bench -m "$M" -t 2 --no-bandwidth --window decode --decode-steps 64 --trace "$d/bad65.json" \
    --json --ab -fused_gate_up >"$d/abb.json" 2>"$d/err"; rc=$?
  [ $rc -eq 1 ] || bad "bench --ab with a tampered trace exited $rc, expected 1: $(cat "$d/err")"
  is_val $d/abb.json token_check.ok false
  is_val $d/abb.json token_check.first_mismatch_step 4
  is_val $d/abb.json token_check.config '"B"'
  "$BIN" bench -m "$M" -t 2 --no-bandwidth --window decode --decode-steps 64 --trace "$d/bad65.json" \
    --ab -fused_gate_up >"$d/abb.txt" 2>"$d/err"
  grep -q "FAILED: decode step 4 (run with flags B)" "$d/abb.txt" || bad "text report does not name B: $(grep FAILED "$d/abb.txt")"
  # ---- --ab with another KV cache format: B on a sibling session, both run
  # every step; B's numerics differ, so only A's 1 + 64 steps are checked
  $AB --json --ab +kv_q8 >"$d/sib.json" 2>"$d/err" || bad "bench --ab +kv_q8 failed: $(cat "$d/err")"
  is_val $d/sib.json token_check.ok true
  is_val $d/sib.json token_check.checked 65
  is_val $d/sib.json ab.pairs 64
  is_val $d/sib.json ab.b_sibling_session true
  is_val $d/sib.json ab.b_tokens_checked false
  jget $d/sib.json ab.b_flags | grep -q "+kv_q8" || bad "ab.b_flags lacks +kv_q8: $(jget $d/sib.json ab.b_flags)"
  # the sibling mode's A/A control: B's steps are checked too (1 + 2 x 64)
  $AB --json --ab '' --ab-sibling >"$d/sibaa.json" 2>"$d/err" || bad "bench --ab '' --ab-sibling failed: $(cat "$d/err")"
  is_val $d/sibaa.json token_check.ok true
  is_val $d/sibaa.json token_check.checked 129
  is_val $d/sibaa.json ab.b_sibling_session true
  is_val $d/sibaa.json ab.b_tokens_checked true
  # step 4 follows input 3, a step that B runs first
  "$BIN" bench -m "$M" -t 2 --no-bandwidth --window decode --decode-steps 64 --trace "$d/bad65.json" \
    --json --ab '' --ab-sibling >"$d/sibb.json" 2>"$d/err"; rc=$?
  [ $rc -eq 1 ] || bad "bench --ab-sibling with a tampered trace exited $rc, expected 1: $(cat "$d/err")"
  is_val $d/sibb.json token_check.first_mismatch_step 4
  is_val $d/sibb.json token_check.config '"B"'
else
  if grep -q "not built" "$d/err"; then
    echo "note: 'moefast trace' is not built into $BIN yet: token-check cases skipped" >&2
  else
    bad "trace record failed: $(cat "$d/err")"
  fi
fi

[ $fail -eq 0 ] && echo "cli_bench: ok"
exit $fail
