#!/usr/bin/env bash
# The checks and benchmarks that need a CUDA GPU, in one script for a short lease of a GPU machine.
#
#   bash benchmarks/gpu_check.sh tests    # the CUDA tests
#   bash benchmarks/gpu_check.sh fit      # the README's default fit (bundled breast cancer) on cuda and on the cpu
#   bash benchmarks/gpu_check.sh peers    # one sghmc step of the 784-100-10 MLP: ours eager and with CUDA
#                                         # graphs, bare and inside a fit (two alternating rounds); the kernel
#                                         # against the torch loop, posteriors and BlackJAX on the GPU
#   bash benchmarks/gpu_check.sh bench    # the other benchmarks' --device cuda modes, shortened to fit a lease
#   bash benchmarks/gpu_check.sh rnn      # the defaults panel's recurrent rows (MNIST-1D, Mackey-Glass) on the GPU
#   bash benchmarks/gpu_check.sh diag     # where an estimator's step goes: reads that wait for the GPU, a profile
#   bash benchmarks/gpu_check.sh auto     # a whole fit eager against CUDA graphs, cold and cached: compile="auto"'s
#                                         # GPU threshold is the steps after which the cold compilation repays
#   bash benchmarks/gpu_check.sh tests peers   # several phases, in order
#
# Run it from the repository's root. Each step has its own time limit (tests and peers fill one 10-minute device
# call: their limits add up to 9.5 minutes; at the fifth lease the graphs step, then three rounds, was cut at its
# 300-s limit after 11 of its 12 workers; fit and bench fit in another call, as do rnn and diag each), and a step
# that fails or runs out of time does not stop the next one; the script exits 1 naming them. The tests phase
# uses pytest-xdist (in the GPU image; not among the wheels).
# Logs go to $OUT (or ./gpu-logs when OUT is unset). Packages the machine lacks (skorch; posteriors and
# BlackJAX for the peers; mnist1d) are installed from wheels in .whl/ when that folder exists, into /tmp/site.
# The figures of the last runs are in benchmarks/README.md, "`gpu_check.sh`: on a GPU".
set -u
export OUT=${OUT:-gpu-logs}  # (gpu_diag.py writes its report there too)
mkdir -p "$OUT"
PY=${PY:-python3}
export PYTHONUNBUFFERED=1 PYTHONPATH=.${PYTHONPATH:+:$PYTHONPATH}
if [ -d .whl ] && ls .whl/*.whl >/dev/null 2>&1; then
    $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
        && export PYTHONPATH=$PYTHONPATH:/tmp/site
fi

failed=()
step() {  # step NAME SECONDS COMMAND...: run with a time limit, log to $OUT/NAME.log, report how it ended
    local name=$1 limit=$2
    shift 2
    local t0=$SECONDS
    echo "=== $name (limit ${limit}s): $*"
    timeout -k 10 "$limit" "$@" >"$OUT/$name.log" 2>&1
    local rc=$?
    echo "=== $name: rc=$rc after $((SECONDS - t0))s"
    [ "$rc" -eq 0 ] || failed+=("$name")
    return 0  # the next step runs anyway; the script's status says what failed
}

for phase in "${@:-tests}"; do
    case "$phase" in tests|fit|peers|bench|rnn|diag|auto) ;; *)
        echo "usage: bash benchmarks/gpu_check.sh [tests|fit|peers|bench|rnn|diag|auto ...] (from the repository's root)" >&2
        exit 2 ;;
    esac
done

nvidia-smi -L 2>&1 | head -2
$PY -c "import torch, sklearn, numpy; print('torch', torch.__version__, 'cuda', torch.version.cuda, \
torch.cuda.get_device_name(), '| sklearn', sklearn.__version__, '| numpy', numpy.__version__)"
for phase in "${@:-tests}"; do
case "$phase" in
tests)
    # every test that needs CUDA, and the CPU-side tests of the device handling beside them
    step cuda_tests 150 $PY -m pytest -q -p no:cacheprovider -rfEs -n 8 -k "cuda or device" \
        tests/test_architectures.py tests/test_estimators.py tests/test_io.py tests/test_pt_langevin.py \
        tests/test_chains.py tests/test_cli.py tests/test_faults.py tests/test_compiled.py
    tail -25 "$OUT/cuda_tests.log"
    ;;
fit)
    # the README's main job on the bundled data, on the GPU and on the CPU
    for dev in cuda cpu; do
        step "cli_fit_$dev" 60 $PY -c "import sys; from bayesnet.cli import main; sys.exit(main(sys.argv[1:]))" \
            fit --device $dev --output "/tmp/model-$dev.bayesnet"
        tail -6 "$OUT/cli_fit_$dev.log"
    done
    ;;
peers)
    # sampler steps of the 784-100-10 MLP on the GPU. First eager against CUDA graphs, bare and inside a fit, the
    # four alternating over two rounds (about 100 s each at the fifth lease, where three overran 300 s; one
    # round each at the fourth left open whether the graphs pay); then the kernel against the torch loop,
    # posteriors and BlackJAX (jax on the GPU when it sees one), one round. Each worker times 5 blocks of 100
    # steps after 20 warm-up steps; an estimator fit runs two epochs of 30,000 rows, the first one its warm-up
    common=(--device cuda --workloads mlp784 --samplers sghmc --steps 100 --repeats 5 --warmup 20 --no-fit
            --estimator-epochs 2 --n-data 30000)
    step peers_graphs 270 $PY benchmarks/peers.py "${common[@]}" --rounds 2 --impls ours-kernel ours-compiled \
        ours-estimator ours-estimator-compiled --compile-mode reduce-overhead --output "$OUT/peers_graphs.json"
    grep "^  round" "$OUT/peers_graphs.log"
    grep -A12 "Seconds per sampler step" "$OUT/peers_graphs.log"
    step peers 150 $PY benchmarks/peers.py "${common[@]}" --rounds 1 --impls ours-kernel torch-loop posteriors \
        blackjax --output "$OUT/peers.json"
    grep "^  round" "$OUT/peers.log"
    grep -A12 "Seconds per sampler step" "$OUT/peers.log"
    ;;
bench)
    # prediction and the chain axis first: short; the panel last (the longest)
    step predict 90 $PY benchmarks/predict_throughput.py --device cuda --repeats 3
    tail -15 "$OUT/predict.log"
    step chains 45 $PY benchmarks/chains_vectorised.py --device cuda --repeats 3
    tail -15 "$OUT/chains.log"
    step panel 240 $PY benchmarks/defaults_panel.py --tasks digits mnist1d-cnn --device cuda --row-timeout 120 \
        --baseline-steps 2000 --output "$OUT/panel.csv"
    grep -A30 "^all rows" "$OUT/panel.log" | head -30
    ;;
rnn)
    # the panel's recurrent rows (issue 13 asks for them on a GPU; never run there yet): bayesnet's three rows, the
    # short Mackey-Glass one first, each time-limited; the per-row lines show even when the step is cut short
    step panel_rnn 480 $PY benchmarks/defaults_panel.py --tasks mackey-rnn mnist1d-rnn --methods bayesnet \
        --device cuda --row-timeout 150 --output "$OUT/panel_rnn.csv"
    grep "^  [a-z]" "$OUT/panel_rnn.log" | cut -c1-250
    ;;
diag)
    step diag 180 $PY benchmarks/gpu_diag.py --device cuda
    grep "^==\|^   synchronising\|^   sync " "$OUT/diag.log" | head -70
    # torch's messages about CUDA graphs and recompilations, without their time stamps, counted
    grep -i "cudagraph\|recompil" "$OUT/diag.log" | sed 's/^[A-Z][0-9]\{4\} [^]]*\] //' | sort | uniq -c \
        | sort -rn | head -15
    ;;
auto)
    # a whole fit of 25,000 draw steps, eager and with CUDA graphs (as compile="auto" compiles on a GPU) alternating
    # over two rounds (the second round's compilation cached), and after how many steps a cold compilation repays
    # itself; 3.7 minutes on an H100 at the seventh lease (28,200 steps)
    step compile_auto 300 $PY benchmarks/compile_auto.py --device cuda
    grep "^round\|^saving" "$OUT/compile_auto.log"
    ;;
esac
done
if [ ${#failed[@]} -gt 0 ]; then
    echo "failed or timed out: ${failed[*]}"
    exit 1
fi
