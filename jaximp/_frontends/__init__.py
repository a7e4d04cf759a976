"""Front ends: CatBoost's ``get_feature_importance`` drop-in, files streamed in and out
(``explain_files``), the ``jaximp`` command and its report, Dask collections, plots and the
persistent compilation cache.
"""
