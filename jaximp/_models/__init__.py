"""The model: a tree ensemble as a frozen JAX pytree, in one of two layouts.

* :class:`~jaximp._models.trees.TreeEnsemble`, the general model: binary trees as padded node
  arrays (per tree: each internal node's feature, border, NaN direction and children; a leaf
  table). Every library's trees import as one.
* :class:`~jaximp._models.oblivious.ObliviousEnsemble`, the fast layout of symmetric trees (per
  tree: D split features and borders, a ``2**D`` leaf table), chosen by the CatBoost importer
  when every tree is symmetric. ``jaximp._models.trees.from_oblivious`` gives its general form.

Both share :class:`~jaximp._models.ensemble.Ensemble` (``ens.layout`` names the layout: the key
of every stage's kernel table), the description of categorical splits they may carry
(``featurizer``: CatBoost's one-hot values and CTRs; ``category_codes`` and bitsets: the
set-membership splits of XGBoost, LightGBM and scikit-learn) and the attribution to columns.

Shape legend, one meaning per letter everywhere in jaximp:

===  ==========================================================================================
N    rows explained
F    features: the model's input columns
T    trees
D    depth: the deepest tree (oblivious), the longest root-to-leaf path (general trees)
L    leaves per tree: ``2**D`` (oblivious), the most leaves of any tree, padded (general trees)
K    outputs: 1 for regression and binary, classes for multiclass, targets for multi-regression
R    repeats (permutation importance)
B    background rows
E    evaluated features: what the splits read (F for numeric models; float features, one-hot
     values and CTRs with categorical features)
M    internal nodes per tree, padded (general trees)
P    players of attribution (F for numeric models; CatBoost's combination classes otherwise)
G    feature groups (permutation importance)
===  ==========================================================================================

Other counts are named in words (``n_blocks``, ``n_words``, ``n_borders``, ...).
"""
