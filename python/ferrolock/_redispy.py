"""The ferrolock URL of a redis-py client: where it connects, and how.

Read from the client's connection settings (``connection_pool.connection_kwargs``,
its connection class, a Sentinel pool's sentinels and service name, a
``RedisCluster``'s nodes), without importing redis-py: a client object is all
it needs. A setting ferrolock cannot honour is refused with ``ValueError``
naming it, rather than connecting somewhere else, or otherwise, silently.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote, urlencode

__all__ = ["url_of"]

def url_of(client: Any) -> str:
    """The ferrolock URL that reaches the same Redis as ``client`` (a
    ``redis.Redis``, a Sentinel ``master_for()`` client, a
    ``redis.cluster.RedisCluster``, or their ``redis.asyncio`` twins), with
    its database, credentials, TLS settings and timeouts."""
    if hasattr(client, "nodes_manager"):
        return _cluster_url(client)
    pool = getattr(client, "connection_pool", None)
    kwargs = getattr(pool, "connection_kwargs", None)
    if pool is None or not isinstance(kwargs, dict):
        raise TypeError(f"client must be a redis-py client (redis.Redis, RedisCluster), got {type(client).__name__}")
    if hasattr(pool, "service_name") and hasattr(pool, "sentinel_manager"):
        return _sentinel_url(pool, kwargs)
    connection_class = getattr(pool, "connection_class", None)
    if _is(connection_class, "UnixDomainSocketConnection") or "path" in kwargs:
        return _unix_url(kwargs)
    tls = _is(connection_class, "SSLConnection")
    host = _host(kwargs.get("host") or "localhost")
    port = int(kwargs.get("port") or 6379)
    scheme = "rediss" if tls else "redis"
    query = _timeouts(kwargs) + (_tls_params(kwargs) if tls else [])
    return f"{scheme}://{_userinfo(kwargs)}{host}:{port}/{int(kwargs.get('db') or 0)}{_query(query)}"


def _is(cls: Any, name: str) -> bool:
    return isinstance(cls, type) and any(c.__name__ == name for c in cls.__mro__)


def _credentials(kwargs: dict[str, Any]) -> tuple[str | None, str | None]:
    provider = kwargs.get("credential_provider")
    if provider is not None:
        creds = tuple(provider.get_credentials())
        if len(creds) == 1:
            return None, creds[0]
        return creds[0], creds[1]
    return kwargs.get("username"), kwargs.get("password")


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _userinfo(kwargs: dict[str, Any]) -> str:
    user, password = _credentials(kwargs)
    if user is None and password is None:
        return ""
    user_part = quote(_text(user), safe="") if user is not None else ""
    if password is None:
        return f"{user_part}@"
    return f"{user_part}:{quote(_text(password), safe='')}@"


def _host(host: str) -> str:
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


def _timeouts(kwargs: dict[str, Any]) -> list[tuple[str, str]]:
    out = []
    for key, param in (("socket_connect_timeout", "connect_timeout"), ("socket_timeout", "timeout")):
        value = kwargs.get(key)
        if value:
            out.append((param, repr(float(value))))
    return out


def _tls_params(kwargs: dict[str, Any]) -> list[tuple[str, str]]:
    for unsupported in ("ssl_certfile", "ssl_keyfile", "ssl_ca_path", "ssl_ca_data"):
        if kwargs.get(unsupported):
            raise ValueError(
                f"{unsupported}: ferrolock cannot use this TLS setting of the redis-py client "
                "(it takes a CA file: ssl_ca_certs, or ssl_cert_reqs='none'); pass url= instead"
            )
    out = []
    reqs = kwargs.get("ssl_cert_reqs", "required")
    if reqs in ("none", 0) or getattr(reqs, "name", None) == "CERT_NONE":
        out.append(("tls_insecure", "1"))
    if kwargs.get("ssl_ca_certs"):
        out.append(("tls_ca", str(kwargs["ssl_ca_certs"])))
    return out


def _query(params: list[tuple[str, str]]) -> str:
    return f"?{urlencode(params)}" if params else ""


def _unix_url(kwargs: dict[str, Any]) -> str:
    user, password = _credentials(kwargs)
    params: list[tuple[str, str]] = [("db", str(int(kwargs.get("db") or 0)))]
    if user is not None:
        params.append(("user", _text(user)))
    if password is not None:
        params.append(("pass", _text(password)))
    params += _timeouts(kwargs)
    return f"unix://{quote(str(kwargs['path']))}{_query(params)}"


def _sentinel_url(pool: Any, kwargs: dict[str, Any]) -> str:
    if not getattr(pool, "is_master", True):
        raise ValueError("client: a Sentinel replica client (slave_for) cannot hold locks; use master_for()")
    manager = pool.sentinel_manager
    hosts = []
    for sentinel in manager.sentinels:
        skw = sentinel.connection_pool.connection_kwargs
        hosts.append(f"{_host(skw.get('host') or 'localhost')}:{int(skw.get('port') or 26379)}")
    tls = _is(getattr(pool, "connection_class", None), "SSLConnection")
    params = _timeouts(kwargs) + (_tls_params(kwargs) if tls else [])
    sentinel_kwargs = getattr(manager, "sentinel_kwargs", None) or {}
    if sentinel_kwargs.get("username"):
        params.append(("sentinel_username", _text(sentinel_kwargs["username"])))
    if sentinel_kwargs.get("password"):
        params.append(("sentinel_password", _text(sentinel_kwargs["password"])))
    scheme = "rediss+sentinel" if tls else "redis+sentinel"
    service = quote(pool.service_name, safe="")
    db = int(kwargs.get("db") or 0)
    return f"{scheme}://{_userinfo(kwargs)}{','.join(hosts)}/{service}/{db}{_query(params)}"


def _cluster_url(client: Any) -> str:
    manager = client.nodes_manager
    kwargs = dict(getattr(manager, "connection_kwargs", None) or {})
    nodes = client.get_nodes() if hasattr(client, "get_nodes") else []
    if not nodes:
        nodes = list(getattr(manager, "startup_nodes", {}).values())
    hosts = sorted({f"{_host(n.host)}:{int(n.port)}" for n in nodes})
    if not hosts:
        raise ValueError("client: this RedisCluster knows no node")
    tls = bool(kwargs.get("ssl")) or _is(kwargs.get("connection_class"), "SSLConnection")
    params = _timeouts(kwargs) + (_tls_params(kwargs) if tls else [])
    scheme = "rediss+cluster" if tls else "redis+cluster"
    return f"{scheme}://{_userinfo(kwargs)}{','.join(hosts)}{_query(params)}"
