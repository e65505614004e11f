#!/usr/bin/env bash
# The Secrets the manifests mount, made from the deployment's files (docs/deploy.md):
#   CTXPRESS_TEAM_HOME=./team-home [CTXPRESS_BRIDGE_USER=alice] bash infra/k8s/create-secrets.sh
# CTXPRESS_TEAM_HOME is the directory `ctxpress deploy setup --node nats-0=nats-0.nats ...` and
# `ctxpress deploy roles --host postgres` wrote, plus secrets/ (the passwords you chose) and users/ (the
# credentials files of `ctxpress users add --out`). A Secret whose files are not there yet is skipped: run it
# again after `deploy roles`, and after every `ctxpress users ...` (nats-config: then reload the nodes).
# tls/ca-key.pem stays on the admin's machine: no Secret carries it.
set -euo pipefail

KIT=${CTXPRESS_TEAM_HOME:?set CTXPRESS_TEAM_HOME to the directory ctxpress deploy setup wrote}
NAMESPACE=${NAMESPACE:-ctxpress}

apply() {  # apply NAME FILE...: Secret NAME, a key per FILE (KEY=PATH, or PATH keyed by its name)
  local name=$1 spec args=()
  shift
  for spec in "$@"; do
    if [ ! -e "${spec#*=}" ]; then
      echo "skipped $name: no ${spec#*=} yet" >&2
      return 0
    fi
    args+=("--from-file=$spec")
  done
  kubectl -n "$NAMESPACE" create secret generic "$name" "${args[@]}" --dry-run=client -o yaml | kubectl apply -f -
}

apply nats-config "$KIT/nats"
apply nats-tls "$KIT/tls/server.pem" "$KIT/tls/server-key.pem" "$KIT/tls/ca.pem"
apply postgres-password "postgres-password=$KIT/secrets/postgres-password"
apply grafana-admin-password "grafana-admin-password=$KIT/secrets/grafana-admin-password"
apply ctxpress-gateway "$KIT/team/gateway.json"
apply ctxpress-completion "$KIT/team/worker.json" "$KIT/database/completion.url"
apply ctxpress-indexer "$KIT/team/indexer.json" "$KIT/database/indexer.url"
if [ -n "${CTXPRESS_BRIDGE_USER:-}" ]; then
  apply ctxpress-bridge "bridge-nats-credentials=$KIT/users/$CTXPRESS_BRIDGE_USER.json" \
    "bridge-http-token=$KIT/users/$CTXPRESS_BRIDGE_USER.token"
fi
