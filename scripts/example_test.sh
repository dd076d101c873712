#!/usr/bin/env bash
# An SDK example end to end, as its user would run it: installs the client SDK into a temporary
# prefix, builds the app against it, exports the job's TorchScript model and the devices' data
# with Debian's python3-torch, starts a coordinator on 127.0.0.1 port 0, creates the job with
# `fedcase jobs create --model`, and runs three app processes until the job finishes on its
# target or has committed its rounds. Passes when the job finished on its target after at least
# two committed rounds and the federated evaluation's accuracy of the last round is above the
# first's.
#   --app sdk_app     examples/sdk_app (C++): built with CMake against the package
#                     (find_package), trains with the SDK's TorchScript trainer
#   --app c_app       examples/c_app (C): built with cc and pkg-config against the package, under
#                     AddressSanitizer (the app; the library is not instrumented, but its heap is
#                     ASan's and LeakSanitizer checks the whole process at exit), trains the
#                     same job with its own C code
#   --app python_app  examples/python_app: the fedcase Python package installed with pip
#                     (--no-build-isolation) into a temporary folder, trains its own PyTorch CNN
#                     on a Fashion-MNIST slice with TorchTrainer
#   --app text_app    examples/text_app: the same package, trains a GRU text classifier on
#                     int64 token ids through TorchTrainer's collate hook; then the job's latest
#                     model, exported with `fedcase models get`, is loaded with torch.jit.load
#                     and must score 0.8 on sentences no device has
#   --app mobilenet_app  examples/mobilenet_app: the same package, trains a MobileNet-style CNN
#                     with BatchNorm; the coordinator scores each committed model on held-out
#                     images the app wrote to its datasets_dir. The latest model, exported as
#                     TorchScript and as npz, must score in eval mode within 1 point of the
#                     accuracy the job reported for that version, and at least 0.7
#   --app finetune_app  examples/finetune_app: the same package, fine-tunes the head of a
#                     pretrained CNN (the job's "trainable"); the exported model's backbone must
#                     be the pretrained one, bit for bit, and it must score 0.7 on unseen images
#   scripts/example_test.sh --build-dir build
#                           [--app sdk_app|c_app|python_app|text_app|mobilenet_app|finetune_app]
set -euo pipefail
cd "$(dirname "$0")/.."
build=build
app=sdk_app
while [ $# -gt 0 ]; do
  case "$1" in
    --build-dir) build=$2; shift 2 ;;
    --app) app=$2; shift 2 ;;
    *) echo "usage: $0 [--build-dir DIR] [--app sdk_app|c_app|python_app|text_app|mobilenet_app|finetune_app]" >&2
       exit 2 ;;
  esac
done
build=$(cd "$build" && pwd)
dir=$(mktemp -d /tmp/fedcase-example-XXXXXX)
pids=()
cleanup() {
  local status=$?
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  if [ "$status" -eq 0 ]; then rm -rf "$dir"; else echo "example_test: logs kept in $dir" >&2; fi
}
trap cleanup EXIT
say() { echo "example_test[$app]: $*"; }
run_logged() {  # run_logged LOG COMMAND...: the command's output goes to LOG, shown on failure
  local log=$1; shift
  "$@" > "$log" 2>&1 || { cat "$log"; exit 1; }
}

say "installing the SDK into $dir/prefix"
run_logged "$dir/install.log" cmake --install "$build" --prefix "$dir/prefix"
case "$app" in
  sdk_app)
    say "building examples/sdk_app against it"
    run_logged "$dir/configure.log" cmake -S examples/sdk_app -B "$dir/app" -G Ninja \
      -DCMAKE_PREFIX_PATH="$dir/prefix" -DCMAKE_BUILD_TYPE=Release
    run_logged "$dir/build.log" cmake --build "$dir/app"
    job_file=examples/sdk_app/job.json
    run_logged "$dir/export.log" /usr/bin/python3 examples/sdk_app/export_model.py \
      --model "$dir/model.pt" --data "$dir/data" --devices 3
    binary=$dir/app/sdk_app ;;
  c_app)
    say "building examples/c_app with cc against it (pkg-config), under AddressSanitizer"
    run_logged "$dir/build.log" make -C examples/c_app -B OUT="$dir/c_app" \
      PKG_CONFIG_PATH="$dir/prefix/lib/pkgconfig" \
      CFLAGS="-O1 -g -std=c11 -Wall -Wextra -Werror -fsanitize=address,undefined -fno-omit-frame-pointer" \
      LDFLAGS="-fsanitize=address,undefined -Wl,-rpath,$dir/prefix/lib"
    job_file=examples/sdk_app/job.json  # the same model as the C++ app's, trained in C
    run_logged "$dir/export.log" /usr/bin/python3 examples/sdk_app/export_model.py \
      --model "$dir/model.pt" --data "$dir/data" --devices 3
    export ASAN_OPTIONS=detect_leaks=1:abort_on_error=0:exitcode=99
    export LSAN_OPTIONS=suppressions=$PWD/examples/c_app/lsan.supp:print_suppressions=0
    binary=$dir/c_app ;;
  python_app|text_app|mobilenet_app|finetune_app)
    say "installing the fedcase Python package with pip"
    cp -r python "$dir/python-src"  # pip builds in the folder it installs from
    run_logged "$dir/pip.log" /usr/bin/python3 -m pip install --no-build-isolation --no-deps \
      --no-index --target "$dir/site" "$dir/python-src"
    export PYTHONPATH=$dir/site FEDCASE_CLIENT_LIBRARY=$dir/prefix/lib/libfedcase_client.so.1
    job_file=examples/$app/job.json
    export_flags=()
    if [ "$app" = mobilenet_app ]; then export_flags=(--server-data "$dir/datasets/fmnist-held-out"); fi
    run_logged "$dir/export.log" /usr/bin/python3 "examples/$app/app.py" export \
      --model "$dir/model.pt" "${export_flags[@]}"
    start_device() {
      exec /usr/bin/python3 "examples/$app/app.py" train --port "$port" \
        --token "$enrollment_token" --name "device-$1" --device "$1" --devices 3 \
        --state-dir "$dir/state-$1"
    } ;;
  *) echo "example_test: unknown app $app" >&2; exit 2 ;;
esac
if [ "$app" != python_app ] && [ "$app" != text_app ] && [ "$app" != mobilenet_app ] &&
   [ "$app" != finetune_app ]; then
  # The C++ and C apps take the same flags: the device's data files, held-out files and state.
  start_device() {
    exec "$binary" --port "$port" --token "$enrollment_token" --name "device-$1" \
      --data "$dir/data/device-$1/train" --held-out "$dir/data/device-$1/held-out" \
      --state-dir "$dir/state-$1"
  }
fi

admin_token=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
enrollment_token=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
jq --arg db "$dir/fedcase.db" --arg pf "$dir/port" --arg admin "$admin_token" \
  --arg enroll "$enrollment_token" --arg datasets "$dir/datasets" \
  '.port = 0 | .port_file = $pf | .database = $db | .admin_token = $admin |
   .enrollment_token = $enroll | .eval_samples = 1000 | .datasets_dir = $datasets' \
  configs/coordinator.json > "$dir/coordinator.json"
"$build/server/fedcase-coordinator" --config "$dir/coordinator.json" > "$dir/coordinator.log" 2>&1 &
pids+=($!)
for _ in $(seq 600); do [ -s "$dir/port" ] && break; sleep 0.05; done
[ -s "$dir/port" ] || { echo "example_test: the coordinator did not start" >&2; exit 1; }
port=$(cat "$dir/port")
export FEDCASE_URL=http://127.0.0.1:$port FEDCASE_TOKEN=$admin_token

job=$("$build/cli/fedcase" jobs create "$job_file" --model "$dir/model.pt" --json | jq -r .job_id)
say "job $job created on port $port"
app_pids=()
for i in 0 1 2; do
  start_device "$i" > "$dir/app-$i.log" 2>&1 &
  pids+=($!)
  app_pids+=($!)
done

committed=0
state=running
for _ in $(seq 1800); do
  "$build/cli/fedcase" jobs show "$job" --json > "$dir/job.json"
  committed=$(jq '[.rounds[] | select(.state == "committed")] | length' "$dir/job.json")
  state=$(jq -r .state "$dir/job.json")
  [ "$state" != running ] && break
  sleep 0.1
done
jq '.rounds' "$dir/job.json" > "$dir/rounds.json"
jq -r '.[] | select(.state == "committed") |
       "round \(.round): federated accuracy \(.metrics.federated_evaluation.metrics.accuracy // "none") over \(.metrics.federated_evaluation.samples // 0) held-out samples"' \
  "$dir/rounds.json"
first=$(jq '[.[] | select(.state == "committed")][0].metrics.federated_evaluation.metrics.accuracy' "$dir/rounds.json")
last=$(jq '[.[] | select(.state == "committed")][-1].metrics.federated_evaluation.metrics.accuracy' "$dir/rounds.json")
reached=$(jq '.result != null' "$dir/job.json")
if [ "$state" != finished ] || [ "$reached" != true ] || [ "$committed" -lt 2 ]; then
  echo "example_test: the job is $state after $committed committed rounds (target reached: $reached)" >&2
  exit 1
fi
if ! jq -n --argjson a "$first" --argjson b "$last" '$b > $a' | grep -q true; then
  echo "example_test: the federated accuracy did not improve ($first -> $last)" >&2
  exit 1
fi
# The apps stop cleanly on SIGTERM, as on Ctrl-C (the C app's sanitizers report at exit).
for p in "${app_pids[@]}"; do kill -TERM "$p"; done
for i in 0 1 2; do
  code=0
  wait "${app_pids[$i]}" || code=$?
  if [ "$code" -ne 0 ]; then
    echo "example_test: device $i exited with $code:" >&2
    tail -30 "$dir/app-$i.log" >&2
    exit 1
  fi
done
pids=("${pids[0]}")
if [ "$app" = text_app ]; then
  # Deployed as it was evaluated: the latest model, exported as TorchScript, loaded with torch.
  run_logged "$dir/get.log" "$build/cli/fedcase" models get "$job" latest --out "$dir/trained.pt"
  run_logged "$dir/check.log" /usr/bin/python3 examples/text_app/app.py check \
    --model "$dir/trained.pt" --min-accuracy 0.8
  say "$(cat "$dir/check.log")"
fi
if [ "$app" = finetune_app ]; then
  # The backbone stayed frozen; the head learned.
  run_logged "$dir/get.log" "$build/cli/fedcase" models get "$job" latest --out "$dir/trained.pt"
  run_logged "$dir/check.log" /usr/bin/python3 examples/finetune_app/app.py check \
    --model "$dir/trained.pt" --pretrained "$dir/model.pt" --min-accuracy 0.7
  say "$(cat "$dir/check.log")"
fi
if [ "$app" = mobilenet_app ]; then
  # What is evaluated is what is exported: the newest version the coordinator has scored, as
  # TorchScript and as npz, in eval mode on the same held-out images, against that score.
  "$build/cli/fedcase" models list "$job" --json > "$dir/models.json"
  version=$(jq '[.models[] | select(.accuracy != null)][-1].version' "$dir/models.json")
  reported=$(jq '[.models[] | select(.accuracy != null)][-1].accuracy' "$dir/models.json")
  say "version $version: the job reported accuracy $reported"
  run_logged "$dir/get.log" "$build/cli/fedcase" models get "$job" "$version" --out "$dir/trained.pt"
  run_logged "$dir/get-npz.log" "$build/cli/fedcase" models get "$job" "$version" \
    --out "$dir/trained.npz" --format npz
  run_logged "$dir/check.log" /usr/bin/python3 examples/mobilenet_app/app.py check \
    --model "$dir/trained.pt" --npz "$dir/trained.npz" --server-data "$dir/datasets/fmnist-held-out" \
    --expect "$reported" --min-accuracy 0.7
  say "$(cat "$dir/check.log")"
fi
say "passed (federated accuracy $first -> $last)"
