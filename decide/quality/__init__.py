"""Right answers: labelled data, metrics, training-free calibration and fitted readouts.

- `data`: labelled JSONL (System One questions + labels) into requests and label indices;
- `metrics`: accuracy, macro-F1, Brier, log loss, ECE, confusion matrix;
- `calibration`: priors from content-free inputs, divided out of a question's distribution;
- `fitting` / `profile`: per-question temperature + bias and linear readouts, stored per model;
- `evaluate`: a labelled set through a Decider, every mode from the same raw scores.
"""
