from __future__ import annotations

from pathlib import Path

import pytest

from spark_eventbus.jobs.pipe import PipeConfigError, load_config, main, one_line

ROOT = Path(__file__).resolve().parents[2]
GOOD = """
[source]
stream = "orders"
group = "pipe"
[sink]
format = "json"
path = "/tmp/x"
[query]
checkpoint = "/tmp/chk"
"""


def test_the_example_config_is_valid():
    cfg = load_config(ROOT / "conf" / "pipe.example.toml")
    assert cfg.source["ackMode"] == "manual" and cfg.sink_format == "parquet"
    assert cfg.dead_letter_stream == "orders:dlq" and cfg.trigger == "availableNow"


@pytest.mark.parametrize(("text", "message"), [
    (GOOD.replace('stream = "orders"\n', ""), "needs 'stream' and 'group'"),
    (GOOD.replace('format = "json"', 'format = "eventbus"'), "takes no 'path'"),
    (GOOD.replace('format = "json"', 'format = "csv"'), "is not supported"),
    (GOOD.replace('path = "/tmp/x"\n', ""), "needs 'path'"),
    (GOOD.replace('checkpoint = "/tmp/chk"\n', ""), "needs 'checkpoint'"),
    (GOOD.replace('group = "pipe"', 'group = "pipe"\nackMode = "commit"'), "must stay 'manual'"),
    ("[source\n", "not valid TOML"),
    # the reader's and the eventbus sink's own options, checked before Spark starts
    (GOOD.replace('group = "pipe"', 'group = "pipe"\nmaxEntriesPerTrigger = "lots"'),
     r"\[source\] option 'maxEntriesPerTrigger' = 'lots' is invalid"),
    (GOOD.replace('group = "pipe"', 'group = "pipe"\nvalueSchema = "n BIGINTT"'),
     r"\[source\] option 'valueSchema'"),
    (GOOD.replace('format = "json"\npath = "/tmp/x"',
                  'format = "eventbus"\noptions = { stream = "o", maxLen = "-3" }'),
     r"\[sink.options\] option 'maxLen'"),
])
def test_invalid_configs_name_the_key_and_the_fix(tmp_path, text, message):
    path = tmp_path / "c.toml"
    path.write_text(text)
    with pytest.raises(PipeConfigError, match=message):
        load_config(path)


def test_eventbus_output_defaults_to_the_source_redis_and_the_fields_map(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text(GOOD.replace('format = "json"\npath = "/tmp/x"',
                                 'format = "eventbus"\noptions = { stream = "out" }')
                    .replace('group = "pipe"', 'group = "pipe"\nurl = "redis://h:1/2"'))
    cfg = load_config(path)
    assert cfg.sink_options == {"stream": "out", "url": "redis://h:1/2"}
    assert cfg.select == ("fields",) and cfg.sink_path is None


def test_eventbus_output_shares_the_sources_sentinels_unless_it_names_its_own_redis(tmp_path):
    path = tmp_path / "c.toml"
    sentinel = ('group = "pipe"\nsentinels = "s1:26379,s2:26379"\nsentinelMaster = "m"\n'
                'url = "redis:///2"')
    path.write_text(GOOD.replace('format = "json"\npath = "/tmp/x"',
                                 'format = "eventbus"\noptions = { stream = "out" }')
                    .replace('group = "pipe"', sentinel))
    assert load_config(path).sink_options == {
        "stream": "out", "url": "redis:///2", "sentinels": "s1:26379,s2:26379",
        "sentinelMaster": "m"}
    path.write_text(GOOD.replace('format = "json"\npath = "/tmp/x"',
                                 'format = "eventbus"\noptions = { stream = "out", url = '
                                 '"redis://other:6379/0" }')
                    .replace('group = "pipe"', sentinel))
    assert load_config(path).sink_options == {"stream": "out", "url": "redis://other:6379/0"}


def test_main_reports_a_bad_config_in_one_line(tmp_path, capsys):
    assert main(["--config", str(tmp_path / "missing.toml")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("pipe: config file") and "not found" in err and err.count("\n") == 1


def test_main_reports_a_bad_reader_option_in_one_line_with_exit_2(tmp_path, capsys):
    path = tmp_path / "c.toml"
    path.write_text(GOOD.replace('group = "pipe"', 'group = "pipe"\nmaxEntriesPerTrigger = "lots"'))
    assert main(["--config", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("pipe: [source] option 'maxEntriesPerTrigger'") and err.count("\n") == 1


@pytest.mark.parametrize(("failure", "line"), [
    (Exception("[STREAM_FAILED] Query terminated with exception: Traceback (most recent call "
               "last):\n  File x\nspark_eventbus.errors.EventBusConnectionError: Redis did not "
               "answer while claiming\n SQLSTATE: 38000\n\tat org.apache.spark.X"),
     "Redis did not answer while claiming"),
    (Exception("\n[SOMETHING] went wrong\nmore"), "[SOMETHING] went wrong"),
    (ValueError(""), "ValueError"),
])
def test_one_line_finds_the_connector_message_inside_spark_errors(failure, line):
    assert one_line(failure) == line
