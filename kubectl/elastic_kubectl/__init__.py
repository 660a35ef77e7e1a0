"""`kubectl etj`: a kubectl plugin that tells a person what a live ElasticTrainingJob is
doing, from what any user who may read the job, its Events, pods and nodes can read.

`cli` parses kubectl's way and runs; `reader` is the one layer that reads the API (through
elastic_api.kube); `job`, `history` and the `*_view` modules are pure (dicts and `now`
in, rows and JSON out); `picture` draws the timeline (matplotlib), for the demo too.
"""
