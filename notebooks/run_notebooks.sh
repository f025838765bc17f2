#!/usr/bin/env bash
# Executes the notebooks headless on fresh tandem output, as CI does (CTest: tandem_notebooks_test).
#
#   notebooks/run_notebooks.sh TANDEM OUT
#
# TANDEM is the tandem binary; OUT receives the data (OUT/plan, OUT/calibration, OUT/fault), the
# executed notebooks (OUT/executed) and their figures (OUT/figures/*.png). Uses Debian's Jupyter
# (jupyter-nbconvert, python3-ipykernel, python3-matplotlib, python3-pandas) on the system python3.
# Exits 77 (CTest's skip) when they are not installed, 1 when a notebook fails or a figure is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
tandem=$(realpath "$1")
out=$(realpath -m "$2")

# The system interpreter and Jupyter, ahead of any other python3 on PATH (pyenv, venvs).
export PATH=/usr/bin:/bin:$PATH
if ! command -v jupyter-nbconvert >/dev/null || ! /usr/bin/python3 -c "import matplotlib, pandas, ipykernel" 2>/dev/null; then
  echo "run_notebooks: jupyter-nbconvert / python3-matplotlib / python3-pandas / python3-ipykernel not installed: skipped"
  exit 77
fi

rm -rf "$out"
mkdir -p "$out"
echo "run_notebooks: data"
"$tandem" plan scenarios/plans/llama3-70b-notebook.yaml --out "$out/plan" --quiet
"$tandem" run scenarios/calibration-h100.yaml --out "$out/calibration" > "$out/calibration.txt"
"$tandem" run scenarios/faults/rank-crash-shrink-64xh100.yaml --out "$out/fault" > "$out/fault.txt"
# Every reference row, predicted against measured (exit 1 when a row misses its aim: the CSV is
# written all the same; the notebook shows how far).
accuracy="$(dirname "$tandem")/../bench/tandem_accuracy"
"$accuracy" --csv "$out/accuracy.csv" > "$out/accuracy.txt" || [[ $? -eq 1 ]]

export TANDEM_NOTEBOOK_DATA="$out" TANDEM_NOTEBOOK_FIGURES="$out/figures"
export TANDEM_REFERENCE="$PWD/../shared/reference/h100_calibration.csv" MPLBACKEND=Agg PYDEVD_DISABLE_FILE_VALIDATION=1
for notebook in notebooks/*.ipynb; do
  echo "run_notebooks: $notebook"
  (cd notebooks && jupyter-nbconvert --to notebook --execute --ExecutePreprocessor.timeout=120 \
     --output-dir "$out/executed" "$(basename "$notebook")") 2>&1 | grep -v -e "^\[NbConvertApp\] Writing" -e "^0.00s - " || true
  [[ -f "$out/executed/$(basename "$notebook")" ]] || { echo "run_notebooks: $notebook failed"; exit 1; }
done

# Every figure: a PNG of a real size (not an empty plot).
status=0
for figure in capacity_step_time capacity_goodput prediction_accuracy prediction_accuracy_all_rows fault_timeline; do
  png="$out/figures/$figure.png"
  if ! /usr/bin/python3 - "$png" <<'PY'
import struct, sys
data = open(sys.argv[1], "rb").read()
assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
width, height = struct.unpack(">II", data[16:24])
assert width >= 600 and height >= 400, f"{width}x{height}"
assert len(data) > 20000, f"only {len(data)} bytes: an empty plot?"
print(f"run_notebooks: {sys.argv[1]}: {width}x{height}, {len(data)} bytes")
PY
  then
    echo "run_notebooks: figure $png missing or not a real plot"
    status=1
  fi
done
exit $status
