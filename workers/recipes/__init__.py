"""Recipes: small, self-contained Spark jobs that check what the cluster can do (``POST /recipes/...``).

Each module is driver-side code with a ``run(ctx, plan) -> JobOutcome``; ``workers.families.RECIPES`` names them.
"""
