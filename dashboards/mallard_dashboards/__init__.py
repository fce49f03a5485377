"""Generator of Mallard's Grafana dashboards (the committed JSON in grafana/dashboards/).

Each dashboard is a Python module (trends, comparison, memory, service) built with the
small helpers in `grafana.py`; `python dashboards/generate.py` writes the JSON and
`--check` fails when the committed JSON differs from what the modules produce.
"""
