#!/bin/sh
# The hostkeeper command: the bundled Node.js runs the compiled CLI, whatever Node the system has, if any.
# The settings hostkeeper.service fixes default to the unit's values here, so `hostkeeper config check`
# reports what the packaged agent uses, and a `hostkeeper serve` run by hand uses the packaged Caddy.
: "${HOSTKEEPER_CADDY_ADMIN=unix:/run/hostkeeper-caddy/admin.sock}"
: "${HOSTKEEPER_CADDY_BINARY=/usr/lib/hostkeeper/caddy/caddy}"
: "${HOSTKEEPER_OPERATOR_UPSTREAM_FILE=/var/lib/hostkeeper-proxy/operator-upstream}"
: "${HOSTKEEPER_CADDY_ENV_FILE=/var/lib/hostkeeper/caddy.env}"
: "${HOSTKEEPER_CADDY_DATA_DIR=/var/lib/hostkeeper-caddy/data}"
: "${HOSTKEEPER_ACCESS_LOG_DIR=/var/lib/hostkeeper-caddy/access-logs}"
: "${HOSTKEEPER_CADDY_JOURNAL_UNIT=hostkeeper-caddy.service}"
export HOSTKEEPER_CADDY_ADMIN HOSTKEEPER_CADDY_BINARY HOSTKEEPER_OPERATOR_UPSTREAM_FILE HOSTKEEPER_CADDY_ENV_FILE \
  HOSTKEEPER_CADDY_DATA_DIR HOSTKEEPER_ACCESS_LOG_DIR HOSTKEEPER_CADDY_JOURNAL_UNIT
exec /usr/lib/hostkeeper/node/bin/node /usr/lib/hostkeeper/dist/src/cli/main.js "$@"
