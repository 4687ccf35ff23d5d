"""Which S3 endpoints a bucket source may name. The admin gives the URL and the server
connects to it, from inside its network: pointed at a cloud's instance metadata service
(169.254.169.254, fd00:ec2::254), that would be a request the server makes for the admin
(SSRF). So an endpoint is an http(s) URL without credentials, never at a link-local
address (the host is resolved first: ``http://2852039166`` is 169.254.169.254 too), and,
when the operator lists endpoints (``RAGDESK_SOURCE_S3_ENDPOINTS``), one of those only.
Loopback and private addresses stay allowed by default: MinIO on the same host or LAN is
the common case.

Checked when a source is created and again before every run. A name that resolves
elsewhere between the check and boto3's own lookup (DNS rebinding) is not caught; the
list of endpoints is the operator's way to rule that out.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable, Iterable, Sequence
from urllib.parse import urlsplit

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Resolver = Callable[[str, int], Iterable[str]]

# Link-local (IPv4 and IPv6) holds the metadata services; AWS's IPv6 one is a ULA.
REFUSED_NETWORKS = (
    ipaddress.ip_network("169.254.0.0/16"),
    ipaddress.ip_network("fe80::/10"),
    ipaddress.ip_network("fd00:ec2::254/128"),
)
DEFAULT_PORTS = {"http": 80, "https": 443}


class EndpointRefused(ValueError):
    """An endpoint_url this server will not connect to; the message says why."""


def check_endpoint(url: str, allowed: Sequence[str], resolve: Resolver | None = None) -> None:
    """Raises ``EndpointRefused`` unless a bucket source may use ``url`` (``allowed``: the
    operator's list; empty: any host that is not link-local)."""
    scheme, host, port = _parts(url)
    if allowed:
        if not any(_matches(entry, scheme, host, port) for entry in allowed):
            raise EndpointRefused(
                f"endpoint_url {url!r} is not one of the endpoints this server allows "
                "(RAGDESK_SOURCE_S3_ENDPOINTS)"
            )
        return  # listed by the operator: whatever it resolves to
    for address in (resolve or _resolve)(host, port):
        if _refused(ipaddress.ip_address(address)):
            raise EndpointRefused(
                f"endpoint_url {url!r} is at a link-local address ({address}), where cloud "
                "instance metadata lives; an operator may allow it in "
                "RAGDESK_SOURCE_S3_ENDPOINTS"
            )


def _parts(url: str) -> tuple[str, str, int]:
    """(scheme, host, port) of an http(s) URL without credentials."""
    try:
        parts = urlsplit(url.strip())
        host, port = parts.hostname, parts.port  # .port raises on a bad or too large port
    except ValueError:  # an unbalanced [ in the host
        raise EndpointRefused(f"endpoint_url {url!r} is not a valid URL") from None
    if parts.scheme not in DEFAULT_PORTS or not host:
        raise EndpointRefused("endpoint_url must be an http(s) URL with a host")
    if parts.username is not None or parts.password is not None:
        raise EndpointRefused("endpoint_url must not hold credentials (user:password@)")
    return parts.scheme, host, port if port is not None else DEFAULT_PORTS[parts.scheme]


def _matches(entry: str, scheme: str, host: str, port: int) -> bool:
    """An entry is an endpoint URL (its scheme, host and port must match) or a host name
    or address alone (any scheme and port)."""
    entry = entry.strip()
    if "://" not in entry:
        return _same_host(entry.strip("[]"), host)
    try:
        listed = _parts(entry)
    except EndpointRefused:
        return False
    return listed[0] == scheme and _same_host(listed[1], host) and listed[2] == port


def _same_host(a: str, b: str) -> bool:
    try:
        return ipaddress.ip_address(a) == ipaddress.ip_address(b)
    except ValueError:
        return a.rstrip(".").casefold() == b.rstrip(".").casefold()


def _refused(address: Address) -> bool:
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return any(address in network for network in REFUSED_NETWORKS)


def _resolve(host: str, port: int) -> list[str]:
    """Every address ``host`` resolves to, as boto3 would connect to one of them."""
    try:
        found = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError):
        raise EndpointRefused(f"the host of endpoint_url ({host}) does not resolve") from None
    return [str(info[4][0]).split("%", 1)[0] for info in found]
