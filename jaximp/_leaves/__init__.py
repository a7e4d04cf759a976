"""Leaves: each row's leaf in each tree, raw predictions and leaf histograms.

One kernel per layout behind one dispatch (``predict.KERNELS``): oblivious trees read a leaf's
bits (``oblivious``); general trees descend level by level, as heaps (``heap``) where they fit,
deeper trees of at most 32 leaves read theirs as leaf masks (``masks``), and the others descend
by child pointers (``trees``). Both quantize each feature once and loop over blocks of rows
the same way (``bins``); what the leaves give is read the same for both (``tables``).
"""
