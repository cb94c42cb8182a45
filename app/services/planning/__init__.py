"""Planning: a request checked against the data, the cluster and the family's rules, turned into the plan its job
runs (a frozen dataclass of plain values from ``workers``: ``TorchPlan``, ``XGBoostPlan``, ``SparkMLPlan``,
``EvaluationPlan``, ``PredictionPlan``).

A job is planned once, in the request: ``jobs.submit`` stores the plan with the job (``workers.plans``) and the
runner executes exactly that plan. Storing it, rather than planning again in the job from the stored request, is
what makes the answer of ``POST /train`` the job's contract: the classes, the array width, the resolved dataset
and model version, the device and the worker count a request was accepted with are the ones the job uses, even if
the data or an alias changed in between. A retry (a lost driver or executor) changes one thing only: the plan's
resume point, set to the newest checkpoint.
"""
