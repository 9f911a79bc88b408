#!/bin/sh
# cli_install.sh — `make install` into a temporary PREFIX, then a program
# built against the installed copy through pkg-config, linked dynamically
# (libmoefast.so, run with LD_LIBRARY_PATH) and statically (libmoefast.a):
# both print the same top-8 logits, bit for bit, as the installed CLI's
# `trace record` on a generated tiny qwen3moe, and the same hash of every
# logit. Also: the soname, pkg-config --static, DESTDIR staging and
# `make uninstall` leaving nothing behind. Needs no root.
d=$(mktemp -d /tmp/moefast-cli-install-XXXXXX) || exit 1
trap 'rm -rf "$d"' EXIT
fail=0
bad() { echo "FAIL: $*" >&2; fail=1; }
die() { echo "FAIL: $*" >&2; exit 1; }
# a make started by this script is not part of the caller's make (make test)
unset MAKEFLAGS MFLAGS MAKELEVEL MODE B
CC=${CC:-cc}
P=$d/prefix

make -s install PREFIX="$P" >"$d/make.log" 2>&1 || { cat "$d/make.log" >&2; die "make install failed"; }
for f in bin/moefast lib/libmoefast.a lib/libmoefast.so.0.1.0 lib/pkgconfig/moefast.pc \
         include/moefast.h include/moefast/engine.h include/moefast/lab.h; do
  [ -f "$P/$f" ] || bad "not installed: $f"
done
[ "$(readlink "$P/lib/libmoefast.so")" = libmoefast.so.0 ] || bad "libmoefast.so does not point to libmoefast.so.0"
[ "$(readlink "$P/lib/libmoefast.so.0")" = libmoefast.so.0.1.0 ] || bad "libmoefast.so.0 does not point to libmoefast.so.0.1.0"
readelf -d "$P/lib/libmoefast.so.0.1.0" | grep -q 'SONAME.*\[libmoefast\.so\.0\]' || bad "soname is not libmoefast.so.0"

export PKG_CONFIG_PATH="$P/lib/pkgconfig"
cflags=$(pkg-config --cflags moefast | sed "s/ *$//") || die "pkg-config --cflags moefast failed"
libs=$(pkg-config --libs moefast) || die "pkg-config --libs moefast failed"
slibs=$(pkg-config --static --libs moefast) || die "pkg-config --static --libs moefast failed"
[ "$cflags" = "-I$P/include" ] || bad "cflags '$cflags', expected -I$P/include"
for l in "-L$P/lib" -lmoefast; do
  case " $libs " in *" $l "*) ;; *) bad "pkg-config --libs lacks $l: $libs" ;; esac
done
for l in -lmoefast -lpcre2-8 -ljansson -lcrypto -lm -lpthread; do
  case " $slibs " in *" $l "*) ;; *) bad "pkg-config --static --libs lacks $l: $slibs" ;; esac
done

# the two builds: strict C11 against the installed header only; the static
# one takes the archive in place of -lmoefast (the linker would pick the .so)
src=tests/data/install_smoke.c
# shellcheck disable=SC2086
$CC -std=c11 -Wall -Wextra -Werror $cflags -o "$d/smoke_dyn" "$src" $libs 2>"$d/cc.log" ||
  { cat "$d/cc.log" >&2; die "dynamic build failed"; }
# shellcheck disable=SC2086
$CC -std=c11 -Wall -Wextra -Werror $cflags -o "$d/smoke_static" "$src" \
  $(echo "$slibs" | sed 's/-lmoefast/-l:libmoefast.a/') 2>"$d/cc.log" ||
  { cat "$d/cc.log" >&2; die "static build failed"; }
readelf -d "$d/smoke_dyn" | grep -q 'NEEDED.*\[libmoefast\.so\.0\]' || bad "the dynamic build does not need libmoefast.so.0"
readelf -d "$d/smoke_static" | grep -q 'NEEDED.*libmoefast' && bad "the static build needs libmoefast.so"

M=$d/tiny.gguf
IDS="588 418 515 478 560 429 258"
STEPS=8
"$P/bin/moefast" gen --arch qwen3moe --preset tiny -o "$M" >/dev/null 2>"$d/err" || die "gen failed: $(cat "$d/err")"
"$P/bin/moefast" trace record -m "$M" --tokens "$(echo $IDS | tr ' ' ,)" --steps $STEPS -o "$d/t.json" \
  >/dev/null 2>"$d/err" || die "trace record failed: $(cat "$d/err")"
# shellcheck disable=SC2086
LD_LIBRARY_PATH="$P/lib" "$d/smoke_dyn" "$M" $STEPS $IDS >"$d/dyn" 2>"$d/err" || bad "dynamic smoke failed: $(cat "$d/err")"
# shellcheck disable=SC2086
"$d/smoke_static" "$M" $STEPS $IDS >"$d/static" 2>"$d/err" || bad "static smoke failed: $(cat "$d/err")"
# the trace's topk rows, one per step, as the smoke program prints them
sed -n 's/^ *\(\[\[.*\]\]\),\{0,1\}$/\1/p' "$d/t.json" >"$d/cli"
[ "$(wc -l <"$d/cli")" -eq $STEPS ] || bad "the trace has $(wc -l <"$d/cli") topk rows, expected $STEPS"
grep -v '^logits' "$d/dyn" | cmp -s - "$d/cli" || bad "dynamic build's top 8 differ from the CLI's trace: $(grep -v '^logits' "$d/dyn" | diff - "$d/cli" | head -4)"
cmp -s "$d/dyn" "$d/static" || bad "dynamic and static builds differ: $(diff "$d/dyn" "$d/static" | head -4)"
grep -q '^logits fnv1a [0-9a-f]\{16\}$' "$d/dyn" || bad "no logits hash line"

make -s uninstall PREFIX="$P" >"$d/make.log" 2>&1 || bad "make uninstall failed: $(cat "$d/make.log")"
left=$(find "$P" ! -type d | head -3)
[ -z "$left" ] || bad "make uninstall left: $left"

# DESTDIR stages under itself while the .pc names the final PREFIX
make -s install DESTDIR="$d/stage" PREFIX=/opt/moefast >"$d/make.log" 2>&1 || bad "make install DESTDIR failed: $(cat "$d/make.log")"
[ -x "$d/stage/opt/moefast/bin/moefast" ] || bad "DESTDIR install lacks opt/moefast/bin/moefast"
grep -q '^prefix=/opt/moefast$' "$d/stage/opt/moefast/lib/pkgconfig/moefast.pc" || bad "the staged .pc does not say prefix=/opt/moefast"
make -s uninstall DESTDIR="$d/stage" PREFIX=/opt/moefast >/dev/null 2>&1
left=$(find "$d/stage" ! -type d | head -3)
[ -z "$left" ] || bad "make uninstall DESTDIR left: $left"
exit $fail
