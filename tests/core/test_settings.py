import argparse

import pytest

from kvspread.settings import ConfigError, Setting, add_settings, layer, load_yaml

SETTINGS = [
    Setting("server.port", "port to listen on", type=int),
    Setting("server.host", "address to bind"),
    Setting("standalone", "run with no cluster", is_flag=True),
]


def _parse(argv):
    p = argparse.ArgumentParser()
    add_settings(p, "extender", SETTINGS)
    return p.parse_args(argv)


def test_precedence_flag_over_env_over_file_over_default():
    file_map = {"server": {"port": 1000, "host": "0.0.0.0"}, "other": {"x": 1}}
    env = {"KVSPREAD_EXTENDER_SERVER_PORT": "2000", "KVSPREAD_EXTENDER_SERVER_HOST": "::1"}
    merged = layer("extender", SETTINGS, _parse(["--port", "3000"]), env, file_map)
    assert merged["server"]["port"] == 3000  # flag
    assert merged["server"]["host"] == "::1"  # env
    assert merged["other"] == {"x": 1}  # file, untouched
    assert "standalone" not in merged  # default left to the part's config
    assert file_map["server"]["port"] == 1000  # input not modified


def test_boolean_switch_from_env():
    merged = layer("extender", SETTINGS, _parse([]), {"KVSPREAD_EXTENDER_STANDALONE": "true"}, {})
    assert merged["standalone"] is True


def test_bad_env_value_names_the_variable():
    with pytest.raises(ConfigError, match="KVSPREAD_EXTENDER_SERVER_PORT"):
        layer("extender", SETTINGS, _parse([]), {"KVSPREAD_EXTENDER_SERVER_PORT": "http"}, {})


def test_help_names_the_environment_variable():
    p = argparse.ArgumentParser()
    add_settings(p, "extender", SETTINGS)
    assert "KVSPREAD_EXTENDER_SERVER_PORT" in p.format_help()


def test_load_yaml_errors_are_clear(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_yaml(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("- a list\n")
    with pytest.raises(ConfigError, match="mapping"):
        load_yaml(bad)
    bad.write_text("a: [unclosed\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_yaml(bad)
    assert load_yaml(None) == {}
