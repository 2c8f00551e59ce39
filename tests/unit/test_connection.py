"""Connection settings (pure): Sentinel options, the failover window, the wait options, and the
time-bounded retry that rides over a promotion."""

from __future__ import annotations

import copy
import importlib
from typing import Any

import pytest
import redis

from spark_eventbus.core.connection import ConnectionSpec, connection_spec, parse_sentinels
from spark_eventbus.errors import ConfigError
from spark_eventbus.options.reader import parse_reader_options
from spark_eventbus.options.writer import parse_sink_options
from spark_eventbus.redisio.retry import WindowRetry
from spark_eventbus.writes.acking import AckingBatchWriter

# the module (the package's name `client` is the function)
retry_module = importlib.import_module("spark_eventbus.redisio.retry")


def test_sentinels_parse_host_port_pairs_ipv6_and_drop_repeats() -> None:
    assert parse_sentinels("a:1, b:26379,[::1]:26380,a:1") == (
        ("a", 1), ("b", 26379), ("::1", 26380))


@pytest.mark.parametrize("raw", ["a", "a:", ":1", "a:0", "a:70000", "a:1,,b:2", "a b:1"])
def test_bad_sentinel_lists_name_the_option_and_show_the_form(raw: str) -> None:
    with pytest.raises(ConfigError, match=r"option 'sentinels' = .* host:port"):
        parse_reader_options({"stream": "s", "sentinels": raw, "sentinelMaster": "m"},
                             streaming=False)


def test_sentinels_and_master_go_together_and_never_with_a_unix_socket() -> None:
    with pytest.raises(ConfigError, match="option 'sentinels' needs option 'sentinelMaster'"):
        parse_sink_options({"stream": "s", "sentinels": "a:1"})
    with pytest.raises(ConfigError, match="option 'sentinelMaster' = 'm' needs option"):
        parse_sink_options({"stream": "s", "sentinelMaster": "m"})
    with pytest.raises(ConfigError, match="unix socket"):
        parse_sink_options({"stream": "s", "url": "unix:///tmp/r.sock", "sentinels": "a:1",
                            "sentinelMaster": "m"})


def test_a_sentinel_url_scheme_says_which_options_to_use() -> None:
    with pytest.raises(ConfigError, match=r"option 'sentinels'.*option 'sentinelMaster'"):
        parse_sink_options({"stream": "s", "url": "redis+sentinel://:pw@h:26379/m"})


def test_the_spec_carries_every_setting_and_hides_the_sentinel_password() -> None:
    opts = parse_reader_options(
        {"stream": "s", "group": "g", "sentinels": "h1:1,h2:2", "sentinelMaster": "m",
         "sentinelUsername": "u", "sentinelPassword": "s3cret", "failoverTimeoutMs": "5000",
         "waitReplicas": "2", "waitTimeoutMs": "700", "waitAof": "true"}, streaming=True)
    spec = opts.connection
    assert spec == ConnectionSpec("redis://localhost:6379/0", None, None, None, None,
                                  (("h1", 1), ("h2", 2)), "m", "u", "s3cret", 5000, 2, 700, True)
    assert spec.waits
    assert "s3cret" not in repr(spec) and "s3cret" not in repr(opts)
    assert spec.display == "Sentinel master 'm' (sentinels h1:1,h2:2)"
    assert "s3cret" in spec.secrets


@pytest.mark.parametrize("option, raw", [("waitReplicas", "-1"), ("waitReplicas", "101"),
                                         ("waitTimeoutMs", "0"), ("waitTimeoutMs", "60000"),
                                         ("failoverTimeoutMs", "x"),
                                         ("waitAof", "yes")])
def test_bad_wait_and_failover_values_name_the_option(option: str, raw: str) -> None:
    with pytest.raises(ConfigError, match=f"option '{option}' = '{raw}' is invalid"):
        parse_sink_options({"stream": "s", option: raw})


def test_waiting_for_replicas_needs_the_sinks_markers() -> None:
    with pytest.raises(ConfigError, match="need option 'idempotent' = true"):
        parse_sink_options({"stream": "s", "waitReplicas": "1", "idempotent": "false"})
    assert parse_sink_options({"stream": "s", "waitReplicas": "1"}).wait_replicas == 1


def test_acking_batch_writer_takes_the_readers_option_names_or_their_snake_case() -> None:
    with pytest.raises(ConfigError, match="option 'sentinels' needs option 'sentinelMaster'"):
        AckingBatchWriter(lambda df, i: None, group="g", sentinels="a:1")
    with pytest.raises(ConfigError, match="option 'waitReplicas' = '-1'"):
        AckingBatchWriter(lambda df, i: None, group="g", wait_replicas=-1)
    w = AckingBatchWriter(lambda df, i: None, group="g", sentinels="a:1", sentinel_master="m",
                          wait_replicas=1, tls_key_file=None)
    assert w.spec.sentinels == (("a", 1),) and w.spec.wait_replicas == 1
    # the reader's options dict as it is (what does not apply is left out); keywords win
    reader = {"url": "redis://h:1/0", "stream": "s", "group": "billing", "ackMode": "manual",
              "deadLetterStream": "s:dlq", "waitAof": "true", "ackBatchSize": "10"}
    w = AckingBatchWriter(lambda df, i: None, reader, ackBatchSize=20, wait_aof=False)
    assert (w.group, w.dead_letter_stream, w.ack_batch_size) == ("billing", "s:dlq", 20)
    assert w.spec.display == "redis://h:1/0" and not w.spec.wait_aof


def test_the_cli_spells_flags() -> None:
    with pytest.raises(ConfigError, match="--sentinels needs --sentinel-master"):
        connection_spec("redis:///0", sentinels="a:1", style="flag")


class _Flaky:
    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.calls = 0

    def __call__(self) -> str:
        self.calls += 1
        if self.calls <= self.failures:
            raise redis.ConnectionError("down")
        return "ok"


def test_the_window_retry_rides_over_failures_inside_the_window() -> None:
    flaky = _Flaky(3)
    assert WindowRetry(30.0).call_with_retry(flaky, lambda _e: None) == "ok"
    assert flaky.calls == 4


def test_before_the_server_ever_answered_the_window_is_short() -> None:
    retry = WindowRetry(3600.0)
    assert copy.deepcopy(retry) is retry  # one state for every connection of a client
    assert not retry.answered
    retry.window_s = 3600.0
    retry_module.FIRST_CONTACT_S, saved = 0.2, retry_module.FIRST_CONTACT_S
    try:
        with pytest.raises(redis.ConnectionError):  # a server that never answered: 0.2 s
            retry.call_with_retry(_Flaky(10**6), lambda _e: None)
        assert retry.call_with_retry(_Flaky(0), lambda _e: None) == "ok"
        assert retry.answered  # from now on a failover is waited out for the whole window
        assert retry.call_with_retry(_Flaky(3), lambda _e: None) == "ok"
    finally:
        retry_module.FIRST_CONTACT_S = saved


def test_the_window_retry_gives_up_once_the_window_has_passed() -> None:
    flaky = _Flaky(10**6)
    with pytest.raises(redis.ConnectionError):
        WindowRetry(0.2).call_with_retry(flaky, lambda _e: None)
    assert 2 <= flaky.calls < 10**6  # at least two tries, then the deadline
    once = _Flaky(10**6)
    with pytest.raises(redis.ConnectionError):
        WindowRetry(0).call_with_retry(once, lambda _e: None)
    assert once.calls == 1  # failoverTimeoutMs=0: no retry


def test_the_window_retry_retries_readonly_replies() -> None:
    calls = []

    def demoted() -> str:
        calls.append(1)
        if len(calls) < 3:
            raise redis.exceptions.ReadOnlyError("READONLY You can't write against a replica.")
        return "ok"
    assert WindowRetry(30.0).call_with_retry(demoted, lambda _e: None) == "ok"


def test_the_retry_table_agrees_with_itself() -> None:
    """One table (redisio.retry): what the cluster's window waits out covers every reply a
    node gives for a slot it does not serve, and every error a call may end with that the
    boundary reports as retriable; a command that did not run is retried after a reconnect."""
    from redis.exceptions import ClusterError, MovedError

    from spark_eventbus.redisio.retry import (
        CLUSTER_REDIRECTS,
        CLUSTER_SEND_AGAIN,
        CLUSTER_UNAVAILABLE,
        NOT_RUN,
        RETRY_ON,
        cluster_in_flux,
        ttl_exhausted,
    )
    for kind in CLUSTER_UNAVAILABLE:
        error = ClusterError("TTL exhausted.") if kind is ClusterError else kind("1 h:1")
        assert cluster_in_flux(error), kind
    assert set(CLUSTER_REDIRECTS) <= set(CLUSTER_SEND_AGAIN) <= set(CLUSTER_UNAVAILABLE) | {
        redis.exceptions.ReadOnlyError}
    assert set(NOT_RUN) <= set(RETRY_ON)
    assert isinstance(MovedError("1 h:1"), CLUSTER_REDIRECTS)
    assert ttl_exhausted(ClusterError("TTL exhausted.")) \
        and not ttl_exhausted(ClusterError("other")) \
        and not ttl_exhausted(redis.ResponseError("TTL exhausted."))


def test_a_cluster_in_flux_is_waited_for_and_a_wrong_command_is_not() -> None:
    from redis.exceptions import (
        ClusterDownError,
        ClusterError,
        MovedError,
        RedisClusterException,
        SlotNotCoveredError,
        TryAgainError,
    )

    from spark_eventbus.redisio.retry import cluster_in_flux
    in_flux = [redis.ConnectionError("refused"), redis.TimeoutError("timeout"),
               ClusterDownError("CLUSTERDOWN The cluster is down"),
               TryAgainError("TRYAGAIN Multiple keys request during rehashing of slot"),
               MovedError("3999 127.0.0.1:6381"), ClusterError("TTL exhausted."),
               SlotNotCoveredError('Slot "12" is not covered by the cluster.'),
               redis.exceptions.ReadOnlyError("READONLY You can't write against a replica."),
               RedisClusterException("Redis Cluster cannot be connected. Please provide at "
                                     "least one reachable node: ...")]
    wrong = [redis.AuthenticationError("invalid username-password pair"),
             redis.ResponseError("WRONGTYPE Operation against a key holding the wrong kind"),
             redis.ResponseError("NOGROUP No such key or consumer group"),
             RedisClusterException("Keys in request don't hash to the same slot")]
    assert [cluster_in_flux(e) for e in in_flux] == [True] * len(in_flux)
    assert [cluster_in_flux(e) for e in wrong] == [False] * len(wrong)

    calls: list[int] = []
    failover = [in_flux[2], in_flux[4]]  # CLUSTERDOWN, then MOVED to the promoted replica

    def healing() -> str:
        calls.append(1)
        if failover:
            raise failover.pop(0)
        return "ok"
    retry = WindowRetry(30.0, (redis.RedisError, RedisClusterException), cluster_in_flux)
    assert retry.call_with_retry(healing, lambda _e: None) == "ok"
    assert len(calls) == 3
    with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
        retry.call_with_retry(lambda: (_ for _ in ()).throw(wrong[1]), lambda _e: None)


def test_the_commands_route_by_their_first_key() -> None:
    from spark_eventbus.redisio.wire import command_key
    assert command_key(("XREADGROUP", "GROUP", "g", "c", "COUNT", 5, "STREAMS", "s", ">")) == "s"
    assert command_key(("EVALSHA", "abc", 2, "k1", "k2", "a")) == "k1"
    assert command_key(("EVALSHA", "abc", 0, "a")) is None
    assert command_key(("XINFO", "GROUPS", "s")) == "s"
    assert command_key(("XACK", "s", "g", "1-1")) == "s"
    assert command_key(("PING",)) is None


@pytest.mark.parametrize("kwargs, says", [
    ({"password": "pw", "password_file": "/f"}, "cannot both be given"),
    ({"url": "redis://u:pw@h:6379/0", "password_file": "/f"}, "cannot both be given"),
    ({"url": "redis://u@h:6379/0", "username_file": "/u", "password_file": "/f"},
     "and the user in"),
    ({"password": "pw", "credential_provider": "m:f"}, "cannot be given with it"),
    ({"url": "redis://u@h:6379/0", "credential_provider": "m:f"}, "user or password in"),
    ({"credential_provider": "m.f"}, "use 'package.module:callable'"),
    ({"credential_provider": "m:f; rm -rf /"}, "use 'package.module:callable'"),
])
def test_one_source_of_credentials_named_in_each_callers_spelling(kwargs, says) -> None:
    url = kwargs.pop("url", "redis://h:6379/0")
    for style, word in (("option", "option '"), ("flag", "--")):
        with pytest.raises(ConfigError) as err:
            connection_spec(url, style=style, **kwargs)
        assert says in str(err.value) and word in str(err.value), str(err.value)
        assert "pw" not in str(err.value).replace("password", "")  # no secret shown


def test_rotating_credentials_make_a_spec_that_retries_refusals() -> None:
    spec = connection_spec("redis://u@h:6379/0", password_file="/run/secrets/redis")
    assert spec.rotating and spec.password_file == "/run/secrets/redis"
    assert not connection_spec("redis://h:6379/0", "pw").rotating
    from spark_eventbus.redisio.credentials import url_user
    assert url_user("redis://u%40x@h:6379/0") == ("redis://h:6379/0", "u@x")
    assert url_user("rediss://h:6380/1") == ("rediss://h:6380/1", None)
    refused = redis.AuthenticationError("WRONGPASS invalid username-password pair")
    assert WindowRetry(1.0, retry_auth=True).retries(refused)
    assert not WindowRetry(1.0).retries(refused)


def test_a_password_file_is_read_at_every_connection(tmp_path) -> None:
    from spark_eventbus.redisio.credentials import CredentialsUnavailable, FileCredentials
    secret = tmp_path / "pw"
    secret.write_text("one\n")
    creds = FileCredentials(str(secret), None, "u", "option")
    assert creds.get_credentials() == ("u", "one")
    secret.write_text("two\n")  # rotated in place
    assert creds.get_credentials() == ("u", "two")
    secret.write_text("")
    with pytest.raises(CredentialsUnavailable, match=r"option 'passwordFile'.*is empty"):
        creds.get_credentials()
    secret.unlink()
    with pytest.raises(CredentialsUnavailable, match="cannot be read"):
        creds.get_credentials()
    (tmp_path / "user").write_text("svc\n")
    secret.write_text("three")
    assert FileCredentials(str(secret), str(tmp_path / "user"), None, "flag"
                           ).get_credentials() == ("svc", "three")


def test_password_file_options_are_checked_at_load(tmp_path) -> None:
    with pytest.raises(ConfigError, match="option 'passwordFile' = '/nope/pw' cannot be read"):
        parse_reader_options({"stream": "s", "passwordFile": "/nope/pw"}, streaming=False)
    (tmp_path / "empty").write_text("  \n")
    with pytest.raises(ConfigError, match=r"option 'passwordFile' .* is empty"):
        parse_sink_options({"stream": "s", "passwordFile": str(tmp_path / "empty")})
    (tmp_path / "pw").write_text("secret-value")
    opts = parse_sink_options({"stream": "s", "passwordFile": str(tmp_path / "pw")})
    assert opts.connection.password_file == str(tmp_path / "pw")
    assert "secret-value" not in repr(opts) + repr(opts.connection)


def test_a_streaming_provider_with_one_listener_reaches_every_pool() -> None:
    """A provider that keeps one listener (as redis-entraid's does) still re-authenticates every
    pool that subscribed: the connector subscribes once and fans out."""
    from redis.credentials import StreamingCredentialProvider

    from spark_eventbus.redisio.credentials import _GuardedStreaming

    class OneListener(StreamingCredentialProvider):
        listener: Any = None

        def get_credentials(self) -> tuple[str, str]:
            return "u", "p"

        def on_next(self, callback: Any) -> None:
            self.listener = callback  # replaces any earlier one

        def on_error(self, callback: Any) -> None:
            pass

        def is_streaming(self) -> bool:
            return True

    inner = OneListener()
    guarded = _GuardedStreaming(inner, "m:f", "option")
    got: list[tuple[str, str]] = []
    guarded.on_next(lambda token: got.append(("a", token)))
    guarded.on_next(lambda token: got.append(("b", token)))
    inner.listener("new-token")
    assert got == [("a", "new-token"), ("b", "new-token")]


def _tls_refusal(reason: str) -> redis.ConnectionError:
    """A ConnectionError as redis-py raises it for a refused handshake: the SSLError as its
    context."""
    import ssl

    cause = ssl.SSLError(1, f"[SSL: {reason}] refused")
    cause.reason = reason  # type: ignore[misc]
    try:
        try:
            raise cause
        except ssl.SSLError:
            raise redis.ConnectionError("Error while reading from 127.0.0.1:6380") from None
    except redis.ConnectionError as exc:
        exc.__context__ = cause
        return exc


@pytest.mark.parametrize("reason", ["TLSV13_ALERT_CERTIFICATE_REQUIRED",
                                    "CERTIFICATE_VERIFY_FAILED", "TLSV1_ALERT_UNKNOWN_CA"])
def test_a_tls_refusal_fails_at_first_contact_and_is_retried_once_the_server_answered(reason):
    first = WindowRetry(30.0)
    assert not first.retries(_tls_refusal(reason))  # configuration: the error at once
    answered = WindowRetry(30.0)
    answered.answered = True  # a certificate rotated on one side first: ridden out
    assert answered.retries(_tls_refusal(reason))
    plain = redis.ConnectionError("Connection reset by peer")  # no TLS cause: a failover
    assert first.retries(plain) and answered.retries(plain)


def test_a_tls_session_closed_unanswered_fails_at_first_contact_and_is_retried_later():
    """Mutual TLS 1.3 without a client certificate: the server closes the session after the
    handshake, and the client's first write may meet it closed (``SSLEOFError``, redis-py's
    "Error 8 while writing to socket. EOF occurred in violation of protocol") before it reads
    the alert. At first contact that is the refusal (it took 35 s of nested retries before);
    once the server has answered, a failover."""
    import ssl

    def eof() -> redis.ConnectionError:
        cause = ssl.SSLEOFError(8, "EOF occurred in violation of protocol (_ssl.c:2427)")
        exc = redis.ConnectionError("Error 8 while writing to socket. EOF occurred in "
                                    "violation of protocol (_ssl.c:2427).")
        exc.__cause__ = cause
        return exc

    first = WindowRetry(30.0)
    assert not first.retries(eof())
    answered = WindowRetry(30.0)
    answered.answered = True
    assert answered.retries(eof())
    reset = redis.ConnectionError("Error 104 while writing to socket. Connection reset.")
    reset.__cause__ = ConnectionResetError(104, "Connection reset by peer")  # not TLS's word
    assert first.retries(reset)


def test_a_call_inside_a_call_is_tried_once_and_the_outer_window_bounds_both():
    """redis-py retries a connect and, inside it, the handshake's health check: with a window
    each, the windows multiplied (a plain client at a TLS port: 35 s, not 5). A nested call
    of the same retry on the same thread is tried once; the outermost retries the whole."""
    retry = WindowRetry(0.3)
    tries = {"outer": 0, "inner": 0}

    def inner() -> None:
        tries["inner"] += 1
        raise redis.ConnectionError("Connection reset by peer")

    def outer() -> None:
        tries["outer"] += 1
        retry.call_with_retry(inner, lambda _: None)

    with pytest.raises(redis.ConnectionError):
        retry.call_with_retry(outer, lambda _: None)
    assert tries["inner"] == tries["outer"] >= 2  # retried, by the outer call alone
    flaky = iter([redis.ConnectionError("reset"), redis.ConnectionError("reset"), None])

    def later() -> str:
        error = next(flaky)
        if error is not None:
            raise error
        return "ok"

    assert retry.call_with_retry(later, lambda _: None) == "ok"  # a later call retries again


def test_a_pickled_spec_carries_the_cluster_nodes_known_for_its_url() -> None:
    """What reaches an executor: the nodes this process knew for the URL, added to what the
    receiving process knows (newest first); equality and hashing ignore them."""
    import pickle

    from spark_eventbus.core import connection as conn

    url = "redis://10.9.8.7:7000/0"
    spec = conn.connection_spec(url)
    assert conn.cluster_nodes(url) == ()
    assert pickle.loads(pickle.dumps(spec)) == spec and conn.cluster_nodes(url) == ()
    try:
        conn.remember_cluster_nodes(url, (("10.9.8.7", 7000), ("10.9.8.8", 7001)))
        blob = pickle.dumps(spec)
        conn._CLUSTER_NODES.clear()
        conn.remember_cluster_nodes(url, (("10.9.8.9", 7002),))
        back = pickle.loads(blob)
        assert back == spec and hash(back) == hash(spec) and "_cluster_nodes" not in vars(back)
        assert conn.cluster_nodes(url) == (("10.9.8.7", 7000), ("10.9.8.8", 7001),
                                           ("10.9.8.9", 7002))
    finally:
        conn._CLUSTER_NODES.pop(url, None)
