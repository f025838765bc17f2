#!/usr/bin/env bash
# The docs test can fail: on broken_example.md it must report each kind of mistake and exit 1, and
# pass good_example.md. Usage: harness_check.sh REPO TANDEM
set -uo pipefail
repo=$1 tandem=$2 here=$(dirname "$0")
out=$(python3 "$here/run_doc_commands.py" "$repo" "$tandem" "$here/broken_example.md" 2>&1)
rc=$?
status=0
[[ $rc -eq 1 ]] || { echo "broken_example.md: exit $rc, expected 1"; status=1; }
for expected in "command exited 2, expected 0: tandem run scenarios/does-not-exist.yaml" \
                "the docs show 'tandem 99.0'" \
                "a command outside a sh block: tandem topo --cluster dgx-h100 --nodes 2" \
                "command exited 0, expected 1: tandem --version"; do
  grep -qF -- "$expected" <<<"$out" || { echo "broken_example.md: no '$expected' in:"; echo "$out"; status=1; }
done
out=$(python3 "$here/run_doc_commands.py" "$repo" "$tandem" "$here/good_example.md" 2>&1) || {
  echo "good_example.md failed:"; echo "$out"; status=1; }
grep -qF "skipped tests/docs/good_example.md" <<<"$out" || { echo "good_example.md: the skip is not reported"; status=1; }
[[ $status -eq 0 ]] && echo "harness_check: the docs test catches each mistake and passes a good page"
exit $status
