# Sourced by scripts/db.sh: PgBouncer in front of the throw-away cluster. Uses its globals (ROOT, STATE, PORT, BINDIR) and scripts/lib/common.sh.

# Transaction pooling, for the isolation tests and the read-pool tests.
start_pgbouncer() {
  local url; url=$(cat "$STATE/url")
  local dir="$STATE/pgbouncer"
  if [ -f "$dir/url" ] && [ -f "$dir/pgbouncer.pid" ] && kill -0 "$(cat "$dir/pgbouncer.pid")" 2>/dev/null; then
    cat "$dir/url"; return 0
  fi
  local bin; bin=$(command -v pgbouncer || ls /usr/sbin/pgbouncer 2>/dev/null) || true
  if [ -z "$bin" ]; then
    apt_install pgbouncer
    bin=$(command -v pgbouncer || echo /usr/sbin/pgbouncer)
  fi
  # postgresql://poopypals:PASSWORD@127.0.0.1:PORT/poopypals, as written by init_cluster.
  local password=${url#*://poopypals:}; password=${password%%@*}
  local server_port; server_port=$(cat "$STATE/port")
  local port=$((server_port + 100)) attempt
  as_owner mkdir -p "$dir"
  echo "\"poopypals\" \"$password\"" | as_owner tee "$dir/userlist.txt" >/dev/null
  as_owner chmod 600 "$dir/userlist.txt"
  for attempt in $(seq 20); do
    while port_in_use "$port"; do port=$((port + 1)); done
    as_owner tee "$dir/pgbouncer.ini" >/dev/null <<INI
[databases]
* = host=127.0.0.1 port=$server_port

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $port
unix_socket_dir =
auth_type = scram-sha-256
auth_file = $dir/userlist.txt
pool_mode = transaction
max_client_conn = 1000
default_pool_size = 20
ignore_startup_parameters = extra_float_digits,options
logfile = $dir/pgbouncer.log
pidfile = $dir/pgbouncer.pid
INI
    launch_pgbouncer "$dir" "$bin" "$port" pgbouncer && break
    port=$((port + 1))
  done
  port_in_use "$port" || die "pgbouncer found no port to listen on after $attempt tries"
  echo "postgresql://poopypals:${password}@127.0.0.1:${port}/poopypals" | as_owner tee "$dir/url"
  say "PgBouncer (transaction pooling) on 127.0.0.1:$port"
}

stop_pgbouncer() {
  local pidfile="$STATE/pgbouncer/pgbouncer.pid"
  if [ -f "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null; then
    kill "$(cat "$pidfile")"; say "pgbouncer stopped"
  fi
  return 0
}
