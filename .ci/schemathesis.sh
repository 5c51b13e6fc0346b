#!/usr/bin/env bash
# schemathesis (from PyPI, pinned) against a running hub: `kalypso hub` built from this
# checkout, on loopback, with a webhook secret and an API token, first on SQLite, then on
# PostgreSQL when KALYPSO_TEST_POSTGRES_URL names a server whose role may create databases.
# The hub follows a small control plane (environment `dev`, two GitOps commits, made here
# with git) and is seeded with signed reports, so that the queries answer with data; the
# document's examples (`dev`, `drone-1`, `hello`, commit `6f1e9c2a`) name that data.
# Every check runs on every operation but the dashboard's endless event stream; any failure fails
# the step. Usage: .ci/schemathesis.sh [MAX_EXAMPLES]
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)

max_examples=${1:-${KALYPSO_SCHEMATHESIS_EXAMPLES:-100}}

# --- schemathesis, in a venv of its own (Debian's Python refuses system-wide pip installs), --
# with the versions pinned in .ci/schemathesis/requirements.txt; the venv is kept between runs,
# named after the pins.
requirements=.ci/schemathesis/requirements.txt
pins=$(sha256sum "${requirements}" | cut -c1-12)
venv=${KALYPSO_SCHEMATHESIS_VENV:-${HOME}/.cache/kalypso/schemathesis-${pins}}
if [ ! -x "${venv}/bin/schemathesis" ]; then
  python3 -m venv "${venv}"
  "${venv}/bin/pip" install --quiet --disable-pip-version-check -r "${requirements}"
fi
"${venv}/bin/schemathesis" --version

# --- the hub binary ---------------------------------------------------------------------------
kalypso=$(cargo build --locked --bin kalypso --message-format=json-render-diagnostics |
  python3 -c 'import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] == "kalypso" and m.get("executable"):
        print(m["executable"])' | tail -n 1)
[ -x "${kalypso}" ] || { echo "no kalypso binary was built" >&2; exit 1; }

work=$(mktemp -d)
hub_pid=
cleanup() {
  if [ -n "${hub_pid}" ]; then kill "${hub_pid}" 2>/dev/null || true; wait "${hub_pid}" 2>/dev/null || true; fi
  rm -rf "${work}"
}
trap cleanup EXIT

secret=schemathesis-hmac-secret
token=schemathesis-api-token
printf '%s' "${secret}" >"${work}/secret"
printf '%s' "${token}" >"${work}/token"
export KALYPSO_SCHEMATHESIS_SECRET=${secret} KALYPSO_SCHEMATHESIS_TOKEN=${token}

# A control plane whose environment `dev` delivers to branch `dev` of a GitOps repository with
# two commits; the second promotes control-plane commit 6f1e9c2a…
git_commit() { git -C "$1" -c user.name=ci -c user.email=ci@localhost commit -q -m "$2"; }
make_repos() {
  local cp=${work}/control-plane gitops=${work}/gitops
  git init -q -b main "${cp}"
  mkdir -p "${cp}/.environments"
  printf '%s\n' 'apiVersion: scheduler.kalypso.io/v1alpha1' 'kind: Environment' 'metadata:' '  name: dev' \
    'spec:' '  controlPlane:' '    repo: https://github.com/contoso/control-plane' '    branch: dev' '    path: .' \
    >"${cp}/.environments/dev.yaml"
  git -C "${cp}" add -A && git_commit "${cp}" environments
  git -C "${cp}" checkout -q --orphan dev && git -C "${cp}" rm -rqf .
  printf '%s\n' 'apiVersion: scheduler.kalypso.io/v1alpha1' 'kind: GitOpsRepo' 'metadata:' '  name: dev' 'spec:' \
    "  repo: file://${gitops}" '  branch: dev' '  path: .' >"${cp}/gitops-repo.yaml"
  git -C "${cp}" add -A && git_commit "${cp}" "gitops repo"
  git -C "${cp}" checkout -q main
  git init -q -b dev "${gitops}"
  mkdir -p "${gitops}/.github/tracking" "${gitops}/drone/hello-dev" "${gitops}/large"
  echo 1111111111111111111111111111111111111111 >"${gitops}/.github/tracking/Promoted_Commit_Id"
  echo '# drone' >"${gitops}/drone/README.md"
  printf '%s\n' 'apiVersion: v1' 'kind: Namespace' 'metadata:' '  name: dev-hello-dev' '  labels:' \
    '    workload: hello' '    deploymentTarget: hello-dev' >"${gitops}/drone/hello-dev/namespace.yaml"
  printf '%s\n' 'apiVersion: source.toolkit.fluxcd.io/v1' 'kind: GitRepository' 'metadata:' '  name: hello' 'spec:' \
    '  url: https://github.com/contoso/app-gitops' '  ref:' '    branch: dev' '---' \
    'apiVersion: kustomize.toolkit.fluxcd.io/v1' 'kind: Kustomization' 'metadata:' '  name: hello' 'spec:' \
    '  path: ./dev' >"${gitops}/drone/hello-dev/reconciler.yaml"
  git -C "${gitops}" add -A && git_commit "${gitops}" "promote 1111111"
  c1=$(git -C "${gitops}" rev-parse HEAD)
  echo 6f1e9c2a4b7d8e0f1a2b3c4d5e6f708192a3b4c5 >"${gitops}/.github/tracking/Promoted_Commit_Id"
  echo '# large' >"${gitops}/large/README.md"
  git -C "${gitops}" add -A && git_commit "${gitops}" "promote 6f1e9c2"
  c2=$(git -C "${gitops}" rev-parse HEAD)
}

make_repos

free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# post PORT PATH BODY: a signed report.
post() {
  local signature
  signature=$(printf '%s' "$3" | openssl dgst -sha256 -hmac "${secret}" -hex | sed 's/^.*= //')
  curl -sS -f -o /dev/null "http://127.0.0.1:$1$2" -H 'Content-Type: application/json' \
    -H "X-Signature: sha256=${signature}" --data-binary "$3"
}

# Flux's events for drone-1 (which applied c2) and drone-2 (which failed c1), a generic report
# for large-1 (c2).
seed() {
  local port=$1 fixtures=crates/hub/tests/fixtures/flux name
  for name in gitrepository-artifact kustomization-progressing kustomization-succeeded; do
    post "${port}" /api/v1/events/flux "$(sed "s/6f1e9c2a4b7d8e0f1a2b3c4d5e6f708192a3b4c5/${c2}/" "${fixtures}/${name}.json")"
  done
  post "${port}" /api/v1/events/flux "$(sed -e "s/6f1e9c2a4b7d8e0f1a2b3c4d5e6f708192a3b4c5/${c1}/" \
    -e 's/"drone-1"/"drone-2"/' "${fixtures}/kustomization-failed.json")"
  post "${port}" /api/v1/compliance "{\"cluster\": \"large-1\", \"clusterType\": \"large\", \"environment\": \"dev\",
    \"gitopsRepo\": \"file://${work}/gitops\", \"branch\": \"dev\", \"commit\": \"${c2}\", \"state\": \"compliant\",
    \"message\": \"synced\"}"
  # Wait until the hub has read the GitOps history.
  for _ in $(seq 1 100); do
    curl -sf -o /dev/null -H "Authorization: Bearer ${token}" "http://127.0.0.1:${port}/api/v1/environments/dev" && return
    sleep 0.1
  done
  echo "the hub did not read the control plane" >&2
  return 1
}

# run LABEL DATABASE_URL: start a hub on the database, seed it, run schemathesis, stop it.
run() {
  local label=$1 database=$2 port
  port=$(free_port)
  "${kalypso}" hub --listen "127.0.0.1:${port}" --database "${database}" \
    --webhook-secret-file "${work}/secret" --api-token-file "${work}/token" \
    --control-plane "${work}/control-plane" --cache-dir "${work}/cache-${label}" \
    --log-format text >"${work}/hub-${label}.log" 2>&1 &
  hub_pid=$!
  for _ in $(seq 1 100); do
    curl -sf "http://127.0.0.1:${port}/readyz" >/dev/null 2>&1 && break
    sleep 0.1
  done
  seed "${port}"
  echo "::: schemathesis against the hub on ${label} (${max_examples} examples per operation)"
  local status=0
  # One worker: Python 3.11's ast.parse, which Hypothesis calls while generating, is not safe
  # in parallel threads ("AST constructor recursion depth mismatch"). A fixed seed makes a run
  # repeatable.
  # Run from the scratch folder, where schemathesis keeps its example database.
  (cd "${work}" && SCHEMATHESIS_HOOKS="${repo}/.ci/schemathesis/hooks.py" "${venv}/bin/schemathesis" \
    --config-file "${repo}/.ci/schemathesis/schemathesis.toml" --no-color run "http://127.0.0.1:${port}/api/v1/openapi.json" \
    --exclude-path /events --max-examples "${max_examples}" --workers 1 --seed 27 \
    --request-timeout 30 ${KALYPSO_SCHEMATHESIS_ARGS:-}) || status=$?
  kill "${hub_pid}"
  wait "${hub_pid}" || true
  hub_pid=
  if [ "${status}" -ne 0 ]; then
    echo "--- the hub's log (${label})"
    tail -n 50 "${work}/hub-${label}.log"
    return "${status}"
  fi
}

run sqlite "sqlite://${work}/hub.db"

if [ -n "${KALYPSO_TEST_POSTGRES_URL:-}" ]; then
  name="kalypso_schemathesis_$$"
  base=${KALYPSO_TEST_POSTGRES_URL%/*}
  psql -q "${KALYPSO_TEST_POSTGRES_URL}" -c "CREATE DATABASE ${name}"
  status=0
  run postgres "${base}/${name}" || status=$?
  psql -q "${KALYPSO_TEST_POSTGRES_URL}" -c "DROP DATABASE ${name}" || true
  exit "${status}"
fi
