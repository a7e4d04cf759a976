"""Leaves: each row's leaf in each tree, raw predictions and leaf histograms.

One kernel per layout (oblivious trees quantize each feature once and read a leaf's bits;
general trees descend level by level) behind one dispatch (``predict.KERNELS``); what the
leaves give, read the same for both (``tables``).
"""
