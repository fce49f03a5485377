"""The web pages people look at, served by the API under /ui (server-rendered HTML).

`routes.py` is the one router (mounted by main.py); `auth.py` the login session;
`svg.py` the plot writer; `fmt.py` number formatting; `links.py` page URLs (imported by
the report and the notifications too, so it depends on nothing but the settings);
`comparison.py`, `history.py`, `commit.py`, `bisection.py` build what each page shows;
`templates/` and `static/` are served from the package, so the pages need no network.

Nothing is imported here: `links` must stay importable from modules the routes import.
"""
