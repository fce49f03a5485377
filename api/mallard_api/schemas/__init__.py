"""Request and response bodies (pydantic v2), shaped like `models/`: `base` (bounded
field types, the strict input model, errors), `core` (the core's resources), `analysis`
(comparisons and alerts), `calibration` (calibrations and a testbed's noise), `verdicts`
(commit verdicts, bisections, forges), `outbox` (the payloads the webhook outbox
carries)."""
