"""`etj demo`: the article's experiment on the local control plane.

`run` orchestrates (cluster, operator, trainer, fault); `summary` and `timeline` are pure:
they turn what was observed into the table, summary.json and the timeline picture.
"""
