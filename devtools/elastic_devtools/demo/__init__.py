"""`etj demo`: the article's experiment on the local control plane.

`run` orchestrates (cluster, operator, trainer, fault); `summary` is pure: it turns what
was observed into summary.json. The table and the timeline picture it ends with are
`kubectl etj status` and `kubectl etj timeline -w --png` (elastic_kubectl).
"""
