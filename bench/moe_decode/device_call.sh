# One device call: build, correctness (fast vs plain vs CPU recipe), the table (plain, fast).
set -x
bench/moe_decode/build.sh /tmp/b 2>&1 | grep -iv warn | tail -5
/tmp/b check > $OUT/check.txt 2>&1; grep -E "check" $OUT/check.txt
/tmp/b paths=plain,fast${1:+,$1} > $OUT/bench.txt 2>&1; cat $OUT/bench.txt
