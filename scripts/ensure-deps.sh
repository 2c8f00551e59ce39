#!/usr/bin/env bash
# Makes sure the machine has what spark-eventbus's tests and demo run: a redis-server >= 7.0
# binary (tests start their own servers on free loopback ports) and Java >= 17 (for Spark).
# Installs Debian packages with apt-get when one is missing and apt-get is usable (root or
# password-less sudo); otherwise prints what to install and fails.
set -euo pipefail

version_ge() { [ "$(printf '%s\n%s\n' "$2" "$1" | sort -V | head -n1)" = "$2" ]; }

redis_ok() {
  local bin="${EVENTBUS_REDIS_SERVER:-redis-server}" v
  command -v "$bin" >/dev/null 2>&1 || return 1
  v=$("$bin" --version | sed -n 's/.*v=\([0-9][0-9.]*\).*/\1/p')
  [ -n "$v" ] && version_ge "$v" 7.0 && echo "redis-server $v ($(command -v "$bin"))"
}

java_ok() {
  command -v java >/dev/null 2>&1 || return 1
  local v
  v=$(java -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -n1)
  [ -n "$v" ] && [ "$v" -ge 17 ] && echo "java $v"
}

apt_install() {
  local sudo=""
  command -v apt-get >/dev/null 2>&1 || return 1
  if [ "$(id -u)" != 0 ]; then
    sudo -n true 2>/dev/null || return 1
    sudo="sudo -n"
  fi
  echo "installing Debian package(s): $*"
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$@" >/dev/null 2>&1 || {
    $sudo apt-get update -q >/dev/null 2>&1
    $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$@" >/dev/null
  }
}

if ! redis_ok; then
  if ! { apt_install redis-server && redis_ok; }; then
    if docker info >/dev/null 2>&1; then
      echo "no redis-server binary; a Docker engine answers, so the tests use testcontainers"
    else
      echo "error: spark-eventbus needs a redis-server >= 7.0 binary on PATH (or in" >&2
      echo "  EVENTBUS_REDIS_SERVER). Install it, e.g. 'sudo apt-get install redis-server'," >&2
      echo "  'brew install redis', or start a Docker engine for testcontainers." >&2
      exit 1
    fi
  fi
fi

if ! java_ok; then
  if ! { apt_install openjdk-17-jre-headless && java_ok; }; then
    echo "error: Spark needs Java 17 or newer on PATH (or JAVA_HOME). Install it, e.g." >&2
    echo "  'sudo apt-get install openjdk-17-jre-headless'." >&2
    exit 1
  fi
fi
