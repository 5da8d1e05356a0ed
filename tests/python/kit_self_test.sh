#!/usr/bin/env bash
# kit_self_test.sh PYTHON TRAINRT_PYTHONPATH: the Python test kit cannot pass by accident. Runs this folder's real
# conftest.py and pytest.ini over small files and checks what CTest would see:
#   every test skipped -> 77 with the reason; a module that skips itself -> 77;
#   some passed, some skipped -> 0 with each reason printed; a failure -> 1; no test at all -> 5;
#   and test_world.py with torch made unimportable -> the torch tests SKIP (not pass).
set -u
py=$1 module_path=$2
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp "$here/conftest.py" "$here/pytest.ini" "$here/_checks.py" "$work/"
fails=0
expect() {  # expect WANT_RC WANT_TEXT FILE...: pytest's exit status and a line of its output
  local want=$1 text=$2
  shift 2
  local out rc
  out=$(cd "$work" && env -u PMIX_RANK PYTHONDONTWRITEBYTECODE=1 "$py" -m pytest "$@" 2>&1)
  rc=$?
  if [[ $rc -eq $want && $out == *"$text"* ]]; then
    echo "ok   $* -> $rc ($text)"
  else
    echo "FAIL $* -> $rc, wanted $want and '$text' in:"
    echo "$out" | tail -15
    fails=$((fails + 1))
  fi
}
cat > "$work/test_all_skip.py" <<'PY'
import pytest
def test_a(): pytest.skip("reason one")
def test_b(): pytest.skip("reason two")
PY
cat > "$work/test_module_skip.py" <<'PY'
from _checks import skip_unless_mpirun
skip_unless_mpirun()
def test_a(): pass
PY
cat > "$work/test_mixed.py" <<'PY'
import pytest
def test_ran(): pass
def test_skipped(): pytest.skip("the reason printed")
PY
cat > "$work/test_fails.py" <<'PY'
import pytest
def test_skipped(): pytest.skip("skipped")
def test_fails(): assert 1 == 2
PY
echo "x = 1" > "$work/test_empty.py"
expect 77 "reason two" test_all_skip.py
expect 77 "PMIX_RANK is not set" test_module_skip.py
expect 0 "the reason printed" test_mixed.py
expect 1 "1 failed" test_fails.py
expect 5 "no tests ran" test_empty.py

# torch hidden: an import of it fails as on a machine without it.
mkdir -p "$work/no-torch/torch"
echo 'raise ImportError("torch hidden by kit_self_test.sh")' > "$work/no-torch/torch/__init__.py"
out=$(cd "$work" && env -u PMIX_RANK PYTHONDONTWRITEBYTECODE=1 PYTHONPATH="$work/no-torch:$module_path" \
      "$py" -m pytest "$here/test_world.py" 2>&1)
rc=$?
skips=$(grep -c "SKIPPED.*torch is not importable" <<<"$out")
if [[ $rc -eq 0 && $skips -ge 2 ]]; then
  echo "ok   test_world.py without torch -> 0, $skips torch tests skipped with the reason"
else
  echo "FAIL test_world.py without torch -> $rc, $skips torch skips:"
  echo "$out" | tail -15
  fails=$((fails + 1))
fi
echo "kit self-test: $fails failure(s)"
[[ $fails -eq 0 ]]
