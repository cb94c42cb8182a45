#!/usr/bin/env bash
# Start the local Redis and PostgreSQL the test suite talks to, when they are installed but not running.
# Nothing is installed; a missing service is reported and the tests that need it skip (or fail under
# SPARKTRAIN_REQUIRE_SERVICES=1).
set -u

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

if ! port_open 6379; then
  if command -v redis-server >/dev/null; then
    echo "starting Redis on 127.0.0.1:6379"
    redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save "" --appendonly no >/dev/null
  else
    echo "Redis is not running and redis-server is not installed" >&2
  fi
fi

if ! port_open 5432; then
  if command -v pg_ctlcluster >/dev/null && [ -d /etc/postgresql ]; then
    echo "starting PostgreSQL on 127.0.0.1:5432"
    pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -n1)" main start
  else
    echo "PostgreSQL is not running and no local cluster was found" >&2
  fi
fi

for _ in $(seq 1 30); do
  port_open 6379 && port_open 5432 && exit 0
  sleep 1
done
exit 0
