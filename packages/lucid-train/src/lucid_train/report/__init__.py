"""What a run shows of itself, as files in its folder: ``metrics.csv`` (`metrics_log`), loss
and metric curves (`training_curves`), the validation figures (`validation_curves`), label
statistics (`label_stats`), the validation mosaic (`val_mosaic`), prediction overlays
(`overlays`), the one-page summary (`summary_page`), all drawn with Pillow (`charts`) and
gathered by one callback (`run_report`)."""
