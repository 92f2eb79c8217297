"""Datasets on disk: the layouts a folder is probed for (`layout`) and each format's reader
(`coco`, `yolo_txt`, `dota`, with `data_yaml` and `yolo_files` for YOLO's files, and
`coco_documents` to write COCO), with the checks every reader shares (`input_checks`).

Each reader turns its files into a `DatasetIndex` of `ImageRecord`s (`lucid_train.data.records`)
and counts what it skipped in a `LoadReport`; a file it cannot read is refused with its path,
line and fix. The floor below holds the records, targets and geometry; the loaders above
(`dataset`, `datamodule`) never read a format's files themselves.
"""
