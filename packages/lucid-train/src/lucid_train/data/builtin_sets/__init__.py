"""The built-in datasets: drawn, not downloaded, from a seed.

`synthetic` writes the small sets ``lucid fit`` trains with no data argument and the harder
benchmark sets (`SyntheticSpec`, cached under ``LUCID_CACHE_DIR``), in COCO JSON through the
writer of the floor below (`lucid_train.data.formats.coco_documents`); `hard_scenes` draws the
harder sets' textured, cluttered scenes and `shapes` the figures both kinds are made of.
"""
