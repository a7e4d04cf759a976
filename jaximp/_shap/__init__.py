"""SHAP: path-dependent, exact, Saabas and interventional SHAP values, expected values, SHAP
interaction values, the Explainer, and the soft (differentiable) model's SHAP values.

Per-tree tables computed once per model (and background), then one lookup per tree and row:
per leaf for oblivious trees (``oblivious``, ``oblivious_tables``), per leaf's path game for
general trees (``trees``, ``tree_plans``, ``paths``, ``games``); one dispatch (``values.KERNELS``).
"""
