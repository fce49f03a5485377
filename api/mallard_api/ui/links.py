"""Page URLs: the paths of the pages under /ui, and absolute links from MALLARD_PUBLIC_URL.

Pages link to each other with `path()` (the public URL's own path prefix in front, for
an API served behind a proxy under /some/prefix). Reports, webhooks and dashboards carry
`absolute()`: the public URL in front, or the bare path when no public URL is set.
"""

from __future__ import annotations

from urllib.parse import quote, urlencode, urlsplit

PREFIX = "/ui"


def comparison(comparison_id: int) -> str:
    return f"{PREFIX}/comparisons/{int(comparison_id)}"


def alert(alert_id: int) -> str:
    return f"{PREFIX}/alerts/{int(alert_id)}"


def bisection(bisection_id: int) -> str:
    return f"{PREFIX}/bisections/{int(bisection_id)}"


def commit(sha: str) -> str:
    return f"{PREFIX}/commits/{quote(sha, safe='')}"


def project(name: str) -> str:
    return f"{PREFIX}/projects/{quote(name, safe='')}"


def branch(project_name: str, branch_name: str) -> str:
    return f"{project(project_name)}/branches/{quote(branch_name, safe='')}"


def series_image(project_name: str, branch_name: str, workload: str, params: str,
                 measure: str, ext: str = "svg") -> str:
    """A series image (`images.py`): `ext` svg or png; `params` the workload's params_key."""
    query = urlencode({"workload": workload, "measure": measure, "params": params})
    return f"{branch(project_name, branch_name)}/series.{ext}?{query}"


def path(public_url: str | None, page: str) -> str:
    """`page` under the public URL's path prefix (for links inside the pages)."""
    prefix = urlsplit(public_url).path.rstrip("/") if public_url else ""
    return prefix + page


def absolute(public_url: str | None, page: str) -> str:
    """`page` as an absolute URL when a public URL is configured, else the path itself."""
    return (public_url.rstrip("/") + page) if public_url else page
