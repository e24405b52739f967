"""One way to reach the Kubernetes API for every part.

In a pod: the in-cluster service account. Elsewhere: a kubeconfig (`--kubeconfig` or
$KUBECONFIG). Tests: `server=` a fake API server's URL (tests/fake_kube.py), no auth.
The `kubernetes` client is imported lazily so that pure modules stay import-light.
"""

from __future__ import annotations

from typing import Any

__all__ = ["api_client"]


def api_client(kubeconfig: str | None = None, server: str | None = None) -> Any:
    """Return a `kubernetes.client.ApiClient`.

    Order: explicit `server` URL (no credentials; for fakes and kubectl proxy), then an
    explicit kubeconfig file, then in-cluster config, then the default kubeconfig.
    Raises `kubernetes.config.ConfigException` when none is available.
    """
    from kubernetes import client, config

    if server:
        cfg = client.Configuration()
        cfg.host = server.rstrip("/")
        cfg.verify_ssl = False
        return client.ApiClient(cfg)
    if kubeconfig:
        return config.new_client_from_config(config_file=kubeconfig)
    try:
        config.load_incluster_config()
        return client.ApiClient()
    except config.ConfigException:
        return config.new_client_from_config()
