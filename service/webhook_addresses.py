"""Where a webhook may be sent: http(s) URLs whose host resolves only to public addresses.

A webhook must not become a way to probe the internal network, so loopback, private (RFC 1918,
unique-local), link-local (and with it the cloud metadata service at 169.254.169.254),
carrier-grade NAT, multicast, reserved and unspecified addresses are refused unless
`LAUNCHBAY_WEBHOOK_ALLOW_PRIVATE` allows them. The check runs when an endpoint is registered
and again at each delivery, on the addresses the delivery then connects to (`resolve_target`),
so a name that resolves elsewhere later (DNS rebinding) is caught where it matters.
"""

import ipaddress
import socket
from dataclasses import dataclass
from urllib.parse import SplitResult, urlsplit

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
MAX_URL_LENGTH = 2048
# Cloud metadata services outside the link-local range (AWS's IPv6 one; Alibaba's).
METADATA_ADDRESSES = frozenset(
    {ipaddress.ip_address("fd00:ec2::254"), ipaddress.ip_address("100.100.100.200")}
)
CGNAT = ipaddress.ip_network("100.64.0.0/10")


class ForbiddenAddress(ValueError):
    """The URL is malformed, or its host is (or resolves to) an address the policy refuses."""


@dataclass(frozen=True)
class WebhookTarget:
    """A URL checked against the policy, and the address to connect to."""

    url: str
    scheme: str
    host: str
    port: int
    address: str


def forbidden_reason(address: IPAddress) -> str | None:
    """Why the policy refuses `address`, or None for a public one."""
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return forbidden_reason(address.ipv4_mapped)
    if address in METADATA_ADDRESSES:
        return "a cloud metadata address"
    checks = (
        (address.is_loopback, "a loopback address"),
        (address.is_link_local, "a link-local address"),
        (address.is_unspecified, "an unspecified address"),
        (address.is_multicast, "a multicast address"),
        (isinstance(address, ipaddress.IPv4Address) and address in CGNAT, "a shared address"),
        (address.is_private, "a private address"),
        (address.is_reserved, "a reserved address"),
        (not address.is_global, "not a public address"),
    )
    return next((why for bad, why in checks if bad), None)


def parse_webhook_url(url: str) -> SplitResult:
    """The URL's parts; ForbiddenAddress unless it is an absolute http(s) URL with a host and
    no credentials."""
    if len(url) > MAX_URL_LENGTH:
        raise ForbiddenAddress(f"the URL is longer than {MAX_URL_LENGTH} characters")
    if any(ord(c) < 33 or ord(c) == 127 for c in url):
        raise ForbiddenAddress("the URL holds spaces or control characters")
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018  (raises on a bad port)
    except ValueError as exc:
        raise ForbiddenAddress(f"not a valid URL: {exc}") from None
    if parts.scheme not in ("http", "https"):
        raise ForbiddenAddress("the URL must be http:// or https://")
    if not parts.hostname:
        raise ForbiddenAddress("the URL has no host")
    if parts.username is not None or parts.password is not None:
        raise ForbiddenAddress("the URL may not hold credentials")
    return parts


def resolve_addresses(host: str, port: int) -> list[IPAddress]:
    """Every address `host` resolves to (an IP literal is itself)."""
    try:
        return [ipaddress.ip_address(host)]
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError) as exc:
        raise ForbiddenAddress(f"cannot resolve {host!r}: {exc}") from None
    found: list[IPAddress] = []
    for info in infos:
        address = ipaddress.ip_address(str(info[4][0]).split("%")[0])
        if address not in found:
            found.append(address)
    if not found:
        raise ForbiddenAddress(f"{host!r} resolves to no address")
    return found


def resolve_target(url: str, *, allow_private: bool) -> WebhookTarget:
    """Check `url` against the policy now: every address its host resolves to must be allowed
    (one bad address among several refuses it, so a round-robin name cannot slip one in).
    Returns the address to connect to; ForbiddenAddress otherwise."""
    parts = parse_webhook_url(url)
    host = str(parts.hostname)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    addresses = resolve_addresses(host, port)
    if not allow_private:
        for address in addresses:
            reason = forbidden_reason(address)
            if reason is not None:
                raise ForbiddenAddress(
                    f"{host!r} is {reason} ({address}); webhooks may only reach public "
                    "addresses (LAUNCHBAY_WEBHOOK_ALLOW_PRIVATE=true allows others)"
                    if str(address) != host
                    else f"{host} is {reason}; webhooks may only reach public addresses "
                    "(LAUNCHBAY_WEBHOOK_ALLOW_PRIVATE=true allows others)"
                )
    return WebhookTarget(url, parts.scheme, host, port, str(addresses[0]))
