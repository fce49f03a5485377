"""The one contract between the runner and the API (docs/contracts.md §5), as pydantic
models both sides import: what a job asks a runner to run (`jobs.JobSpec`, validated by
the API when a job is queued and by the runner when it claims one, `jobs.ClaimedJob`),
what a runner posts back (`results.ResultsIn`; `jobs.ClaimIn`, `LeaseIn`, `FailIn`;
`runners.RunnerRegister`, `Heartbeat`), the names a job may use (`names`: peers, variant
keys), the bounded field types they are made of (`fields`), and the rules both sides
check before git sees a value: git refs (`refs`) and repository URLs with their
allow-lists (`repo_urls`)."""
