#!/usr/bin/env bash
# Create a Cloud TPU VM slice, ship pretrainx to every worker, run one command on all
# of them, and (with --spot) bring the run back after a preemption. See usage below.
# Written for bash 3.2+ (macOS's /bin/bash too): no associative arrays, no ${x@Q}.
set -euo pipefail

usage() {
  cat <<'EOF'
usage: launch/tpu_vm.sh COMMAND [OPTIONS] [-- CMD...]

Commands:
  create          create the slice (with --spot: a queued resource, waited for
                  until ACTIVE)
  setup           copy the code (git archive of HEAD's commit, or --repo=URL) to
                  ~/pretrainx on every worker and install it with its "tpu" extra
                  into ~/.pretrainx-venv
  run -- CMD...   run CMD in ~/pretrainx on every worker (--worker=all); output goes
                  to the terminal and to logs/NAME/TIME.log
  train -- CMD... create (if absent), setup, run; with --spot, after a preemption
                  delete, recreate, setup and run CMD again (it resumes from its last
                  checkpoint), at most --max-restarts times
  status          the state of the slice and of its queued resource
  stop            stop the slice's VMs (gcloud tpu-vm stop; multi-host slices are
                  deleted rather than stopped)
  delete          delete the slice, and its queued resource if there is one

Options (--opt=value or --opt value):
  --name=NAME               slice name (default: $TPU_NAME)
  --zone=ZONE               e.g. us-east1-d (default: $ZONE)
  --project=PROJECT         (default: $PROJECT, else gcloud's configured project)
  --accelerator-type=TYPE   e.g. v3-32, v4-32, v5litepod-16 (default: $ACCELERATOR_TYPE)
  --runtime-version=V       default: tpu-ubuntu2204-base for v2/v3/v4,
                            v2-alpha-tpuv5-lite for v5litepod, v2-alpha-tpuv5 for v5p,
                            v2-alpha-tpuv6e for v6e
  --spot                    spot capacity through a queued resource; train restarts
                            after preemptions
  --max-restarts=N          train: give up after N restarts (default 10)
  --repo=URL                setup: git clone URL on the workers instead of copying HEAD
  --python=VERSION          setup: Python of the workers' venv (default 3.12; uv fetches
                            it when the image has an older one)
  --log-dir=DIR             run/train: where logs go (default: logs)
  --quiet                   delete: do not ask for confirmation
  --dry-run                 print the commands (one per line, after "+ ", quoted for a
                            shell) and run nothing; state queries are skipped: train
                            creates the slice, delete takes it to be a queued resource
                            exactly when --spot is given
  -h, --help                this text

A CMD of several words reaches the workers word for word; a single word is a shell
command line (pipes, &&, $VARS are the workers'). Example:

  launch/tpu_vm.sh train --name=bert --zone=us-east1-d --accelerator-type=v3-32 \
      --spot -- python -m pretrainx.main --config=configs/bert_base.py \
      --workdir=gs://BUCKET/bert_base
EOF
}

# ---------------------------------------------------------------------------- options

NAME=${TPU_NAME:-}
ZONE=${ZONE:-}
PROJECT=${PROJECT:-}
ACCEL=${ACCELERATOR_TYPE:-}
RUNTIME=
SPOT=0
DRY_RUN=0
QUIET=0
MAX_RESTARTS=10
REPO_URL=
PYTHON_VERSION=3.12
LOG_DIR=logs
SHIP_COMMIT=
SUBCMD=
USER_CMD=()

# Seconds between polls of a queued resource, and before a second look at a slice that
# reads READY just after a failed run (the state can lag a preemption).
POLL_SECONDS=${PRETRAINX_TPU_POLL_SECONDS:-30}
RECHECK_SECONDS=${PRETRAINX_TPU_RECHECK_SECONDS:-60}

REMOTE_DIR=pretrainx               # on each worker, relative to the home directory
# shellcheck disable=SC2016  # $HOME is the workers'
REMOTE_VENV='$HOME/.pretrainx-venv'
REPO_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

die_usage() { echo "error: $*" >&2; exit 2; }
say() {  # to stderr, and to the log when there is one
  echo "$*" >&2
  if [ -n "${LOG_FILE:-}" ]; then echo "$*" >>"$LOG_FILE"; fi
}
info() { say "tpu_vm: $*"; }
die() { say "error: $*"; exit 1; }

parse_args() {
  local opt val has_val
  while [ $# -gt 0 ]; do
    case $1 in
      --) shift; USER_CMD=("$@"); return ;;
      -h|--help) usage; exit 0 ;;
      --*=*) opt=${1%%=*}; val=${1#*=}; has_val=1 ;;
      *) opt=$1; val=; has_val=0 ;;
    esac
    case $opt in
      --name|--zone|--project|--accelerator-type|--runtime-version|--max-restarts|\
      --repo|--python|--log-dir)
        if [ "$has_val" = 0 ]; then
          [ $# -ge 2 ] || die_usage "$opt needs a value"
          val=$2; shift
        fi
        case $opt in
          --name) NAME=$val ;;
          --zone) ZONE=$val ;;
          --project) PROJECT=$val ;;
          --accelerator-type) ACCEL=$val ;;
          --runtime-version) RUNTIME=$val ;;
          --max-restarts) MAX_RESTARTS=$val ;;
          --repo) REPO_URL=$val ;;
          --python) PYTHON_VERSION=$val ;;
          --log-dir) LOG_DIR=$val ;;
        esac ;;
      --spot|--dry-run|--quiet)
        [ "$has_val" = 0 ] || die_usage "$opt takes no value"
        case $opt in
          --spot) SPOT=1 ;;
          --dry-run) DRY_RUN=1 ;;
          --quiet) QUIET=1 ;;
        esac ;;
      -*) die_usage "unknown option $opt (see --help)" ;;
      *)
        [ -z "$SUBCMD" ] || die_usage "unexpected argument '$1' (the command to run goes after --)"
        SUBCMD=$1 ;;
    esac
    shift
  done
}

default_runtime() {
  case $1 in
    v2-*|v3-*|v4-*) echo tpu-ubuntu2204-base ;;
    v5litepod-*) echo v2-alpha-tpuv5-lite ;;
    v5p-*) echo v2-alpha-tpuv5 ;;
    v6e-*) echo v2-alpha-tpuv6e ;;
    *) return 1 ;;
  esac
}

require_slice() {
  [ -n "$NAME" ] || die_usage "--name is required (or set TPU_NAME)"
  [ -n "$ZONE" ] || die_usage "--zone is required (or set ZONE)"
}

require_create_options() {
  [ -n "$ACCEL" ] || die_usage "--accelerator-type is required to create a slice, e.g. v3-32"
  if [ -z "$RUNTIME" ]; then
    RUNTIME=$(default_runtime "$ACCEL") ||
      die_usage "no default --runtime-version for --accelerator-type=$ACCEL; pass one"
  fi
}

require_command() {
  [ ${#USER_CMD[@]} -gt 0 ] ||
    die_usage "$SUBCMD needs the command to run after --, e.g. $SUBCMD -- python -m pretrainx.main ..."
}

# ---------------------------------------------------------------------------- commands

# One word quoted for a POSIX shell, only if it needs it: 'single quotes' for anything
# printable, bash's $'...' (printf %q) for control characters.
quote() {
  local w=$1 q="'" out=
  case $w in
    '') printf "''"; return ;;
    *[!A-Za-z0-9_@%+=:,./-]*) ;;
    *) printf '%s' "$w"; return ;;
  esac
  case $w in
    *[[:cntrl:]]*) printf '%q' "$w"; return ;;
  esac
  while :; do
    case $w in
      *"$q"*) out="$out${w%%"$q"*}'\\''"; w=${w#*"$q"} ;;
      *) break ;;
    esac
  done
  printf "'%s%s'" "$out" "$w"
}

# Words quoted and joined by spaces, --flag='value' rather than '--flag=value'.
quote_cmd() {
  local w sep=
  for w in "$@"; do
    printf '%s' "$sep"
    case $w in
      --*=*)
        case ${w%%=*} in
          *[!A-Za-z0-9._-]*) quote "$w" ;;
          *) printf '%s=' "${w%%=*}"; quote "${w#*=}" ;;
        esac ;;
      *) quote "$w" ;;
    esac
    sep=' '
  done
}

# "+ command" on stdout in a dry run, on stderr (and in the log) in a real one.
show() {
  local line
  line="+ $(quote_cmd "$@")"
  if [ "$DRY_RUN" = 1 ]; then
    echo "$line"
  else
    echo "$line" >&2
    if [ -n "${LOG_FILE:-}" ]; then echo "$line" >>"$LOG_FILE"; fi
  fi
}

# gcloud with --project when one is set, shown and then run (not in a dry run).
gc() {
  local args=(gcloud "$@")
  if [ -n "$PROJECT" ]; then args+=(--project="$PROJECT"); fi
  show "${args[@]}"
  if [ "$DRY_RUN" = 1 ]; then return 0; fi
  "${args[@]}"
}

# A read-only gcloud query, not shown: its stdout, or nothing if the resource does not
# exist. Other failures are retried twice, then fatal.
query() {
  local args=(gcloud "$@") out attempt=1
  if [ -n "$PROJECT" ]; then args+=(--project="$PROJECT"); fi
  while :; do
    if out=$("${args[@]}" 2>"$ERR_FILE"); then
      printf '%s' "$out"
      return 0
    fi
    if grep -qiE 'NOT_FOUND|not found' "$ERR_FILE"; then return 0; fi
    if [ "$attempt" -ge 3 ]; then
      die "cannot read the state of $NAME: $(grep -m1 . "$ERR_FILE" || echo "gcloud failed")"
    fi
    attempt=$((attempt + 1))
    sleep "$POLL_SECONDS"
  done
}

node_state() {
  query compute tpus tpu-vm describe "$NAME" --zone="$ZONE" --format='value(state)'
}

qr_state() {
  query compute tpus queued-resources describe "$NAME" --zone="$ZONE" \
    --format='value(state.state)'
}

# The slice as the launcher sees it: READY, ABSENT, LOST (preempted, terminated, or a
# suspended/failed queued resource), PENDING (a queued resource on its way), or
# another state as gcloud spells it.
slice_state() {
  local node qr
  node=$(node_state) || exit 1
  qr=$(qr_state) || exit 1
  case $qr in SUSPENDING|SUSPENDED|FAILED) echo LOST; return ;; esac
  case $node in
    PREEMPTED|TERMINATED) echo LOST; return ;;
    READY) echo READY; return ;;
  esac
  case $qr in
    ACCEPTED|PROVISIONING|WAITING_FOR_RESOURCES|CREATING) echo PENDING; return ;;
    ACTIVE) if [ -z "$node" ]; then echo LOST; return; fi ;;
  esac
  if [ -z "$node" ] && [ -z "$qr" ]; then echo ABSENT; return; fi
  echo "${node:-queued resource $qr}"
}

wait_active() {
  local state last=
  [ "$DRY_RUN" = 0 ] || return 0
  while :; do
    state=$(qr_state) || exit 1
    case $state in
      ACTIVE) info "queued resource $NAME is ACTIVE"; return 0 ;;
      FAILED|SUSPENDED|SUSPENDING|'')
        die "queued resource $NAME is ${state:-gone} while waiting for it" ;;
    esac
    if [ "$state" != "$last" ]; then info "queued resource $NAME: $state (waiting for ACTIVE)"; fi
    last=$state
    sleep "$POLL_SECONDS"
  done
}

create_slice() {
  require_create_options
  if [ "$SPOT" = 1 ]; then
    gc compute tpus queued-resources create "$NAME" --node-id="$NAME" --zone="$ZONE" \
      --accelerator-type="$ACCEL" --runtime-version="$RUNTIME" --spot
    wait_active
  else
    gc compute tpus tpu-vm create "$NAME" --zone="$ZONE" --accelerator-type="$ACCEL" \
      --version="$RUNTIME"
  fi
}

delete_slice() {  # $1 = 1 to skip gcloud's confirmation
  local quiet=() node qr
  if [ "$1" = 1 ]; then quiet=(--quiet); fi
  if [ "$DRY_RUN" = 1 ]; then
    if [ "$SPOT" = 1 ]; then qr=assumed; else qr=; fi
  else
    qr=$(qr_state) || exit 1
    node=$(node_state) || exit 1
    if [ -z "$qr" ] && [ -z "$node" ]; then
      info "no slice $NAME in $ZONE: nothing to delete"
      return 0
    fi
  fi
  if [ -n "$qr" ]; then  # --force deletes its node too
    gc compute tpus queued-resources delete "$NAME" --zone="$ZONE" --force \
      ${quiet[@]+"${quiet[@]}"}
  else
    gc compute tpus tpu-vm delete "$NAME" --zone="$ZONE" ${quiet[@]+"${quiet[@]}"}
  fi
}

ssh_all() {  # $1 = the command line for the workers' shell
  gc compute tpus tpu-vm ssh "$NAME" --zone="$ZONE" --worker=all --command="$1"
}

setup_slice() {
  local fetch install tmp tarball
  if [ -n "$REPO_URL" ]; then
    fetch="rm -rf $REMOTE_DIR.new && git clone -q --depth=1 $(quote "$REPO_URL") $REMOTE_DIR.new"
  else
    if [ -z "$SHIP_COMMIT" ]; then  # once: a restart ships what the first setup did
      SHIP_COMMIT=$(git -C "$REPO_ROOT" rev-parse HEAD 2>/dev/null) ||
        die "$REPO_ROOT is not a git checkout; pass --repo=URL"
      if [ -n "$(git -C "$REPO_ROOT" status --porcelain --untracked-files=no)" ]; then
        info "note: shipping HEAD (${SHIP_COMMIT:0:12}); uncommitted changes stay here"
      fi
    fi
    if [ "$DRY_RUN" = 1 ]; then tmp=${TMPDIR:-/tmp}; else tmp=$(mktemp -d); SETUP_TMP=$tmp; fi
    tarball=$tmp/pretrainx-$NAME.tar.gz
    show git -C "$REPO_ROOT" archive --format=tar.gz -o "$tarball" "$SHIP_COMMIT"
    if [ "$DRY_RUN" = 0 ]; then
      git -C "$REPO_ROOT" archive --format=tar.gz -o "$tarball" "$SHIP_COMMIT"
    fi
    gc compute tpus tpu-vm scp "$tarball" "$NAME:pretrainx.tar.gz" --zone="$ZONE" --worker=all
    if [ "$DRY_RUN" = 0 ]; then rm -rf "$tmp"; fi
    fetch="rm -rf $REMOTE_DIR.new && mkdir $REMOTE_DIR.new"
    fetch="$fetch && tar -xzf pretrainx.tar.gz -C $REMOTE_DIR.new && rm pretrainx.tar.gz"
  fi
  # uv gives the venv a recent Python where the image's is older (Ubuntu 22.04: 3.10).
  # shellcheck disable=SC2016  # expanded by the workers' shell
  install='export PATH="$HOME/.local/bin:$PATH"'
  install="$install && { command -v uv >/dev/null || python3 -m pip install -q --user uv"
  install="$install || python3 -m pip install -q --user --break-system-packages uv; }"
  install="$install && { [ -x $REMOTE_VENV/bin/python ]"
  install="$install || uv venv -q --python $(quote "$PYTHON_VERSION") $REMOTE_VENV; }"
  install="$install && cd $REMOTE_DIR && uv pip install -q --python $REMOTE_VENV/bin/python"
  install="$install -e \".[tpu]\""
  ssh_all "set -e; $fetch && rm -rf $REMOTE_DIR && mv $REMOTE_DIR.new $REMOTE_DIR && $install"
}

# The workers' command line for USER_CMD: a single word as it is, several quoted.
remote_command() {
  local cmd
  if [ ${#USER_CMD[@]} -eq 1 ]; then cmd=${USER_CMD[0]}; else cmd=$(quote_cmd "${USER_CMD[@]}"); fi
  printf '%s' "cd $REMOTE_DIR && . $REMOTE_VENV/bin/activate && $cmd"
}

open_log() {
  [ "$DRY_RUN" = 0 ] || return 0
  mkdir -p "$LOG_DIR/$NAME"
  LOG_FILE=$LOG_DIR/$NAME/$(date +%Y%m%d-%H%M%S).log
  : >>"$LOG_FILE"
  info "log: $LOG_FILE"
}

# Runs USER_CMD on all workers; returns its exit status.
run_all() {
  local rc=0
  if [ "$DRY_RUN" = 1 ]; then ssh_all "$(remote_command)"; return 0; fi
  ssh_all "$(remote_command)" 2>&1 | tee -a "$LOG_FILE" || rc=$?
  return "$rc"
}

# After a failed run: LOST, or READY/another state once it has been read twice.
state_after_failure() {
  local state
  state=$(slice_state) || exit 1
  case $state in LOST|ABSENT) echo LOST; return ;; esac
  sleep "$RECHECK_SECONDS"
  state=$(slice_state) || exit 1
  case $state in LOST|ABSENT) echo LOST ;; *) echo "$state" ;; esac
}

ensure_slice() {
  local state
  if [ "$DRY_RUN" = 1 ]; then create_slice; return; fi
  state=$(slice_state) || exit 1
  case $state in
    READY) info "slice $NAME is READY" ;;
    ABSENT) create_slice ;;
    PENDING) wait_active ;;
    LOST) info "slice $NAME was preempted: recreating it"; delete_slice 1; create_slice ;;
    *) die "slice $NAME is $state; wait, or delete it" ;;
  esac
}

cmd_train() {
  local rc restarts=0 state
  require_command
  require_create_options
  case $MAX_RESTARTS in
    ''|*[!0-9]*) die_usage "--max-restarts must be a whole number, not '$MAX_RESTARTS'" ;;
  esac
  open_log
  ensure_slice
  setup_slice
  while :; do
    rc=0
    run_all || rc=$?
    if [ "$rc" = 0 ]; then
      if [ "$DRY_RUN" = 0 ]; then info "done: the command exited 0 on every worker"; fi
      return 0
    fi
    if [ "$SPOT" = 0 ]; then
      say "error: the command failed (exit $rc); only --spot runs are restarted"
      return "$rc"
    fi
    state=$(state_after_failure) || exit 1
    if [ "$state" != LOST ]; then
      say "error: the command failed (exit $rc) on a $state slice: not a preemption, not restarting"
      return "$rc"
    fi
    if [ "$restarts" -ge "$MAX_RESTARTS" ]; then
      say "error: $NAME was preempted again after $restarts restarts" \
        "(--max-restarts=$MAX_RESTARTS): giving up"
      return 1
    fi
    restarts=$((restarts + 1))
    info "$NAME was preempted: restart $restarts of at most $MAX_RESTARTS"
    delete_slice 1
    create_slice
    setup_slice
  done
}

cmd_status() {
  local node qr
  if [ "$DRY_RUN" = 1 ]; then
    gc compute tpus tpu-vm describe "$NAME" --zone="$ZONE" --format='value(state)'
    gc compute tpus queued-resources describe "$NAME" --zone="$ZONE" \
      --format='value(state.state)'
    return 0
  fi
  node=$(query compute tpus tpu-vm describe "$NAME" --zone="$ZONE" \
    --format='value(state,acceleratorType,runtimeVersion)' | tr '\t' ' ') || exit 1
  qr=$(qr_state) || exit 1
  if [ -z "$node" ] && [ -z "$qr" ]; then echo "$NAME: no such slice in $ZONE"; return 0; fi
  echo "$NAME: node ${node:-absent}${qr:+; queued resource $qr}"
}

main() {
  parse_args "$@"
  [ -n "$SUBCMD" ] ||
    die_usage "a command is required: create, setup, run, train, status, stop or delete (see --help)"
  case $SUBCMD in
    create|setup|run|train|status|stop|delete) ;;
    *) die_usage "unknown command '$SUBCMD' (see --help)" ;;
  esac
  require_slice
  ERR_FILE=$(mktemp)
  SETUP_TMP=
  trap 'rm -rf "$ERR_FILE" ${SETUP_TMP:+"$SETUP_TMP"}' EXIT
  case $SUBCMD in
    create) create_slice ;;
    setup) setup_slice ;;
    run) require_command; open_log; run_all ;;
    train) cmd_train ;;
    status) cmd_status ;;
    stop) gc compute tpus tpu-vm stop "$NAME" --zone="$ZONE" ;;
    delete) delete_slice "$QUIET" ;;
  esac
}

main "$@"
