"""Right answers: labelled data, metrics, training-free calibration and fitted readouts.

- `data`: labelled JSONL (System One questions + labels) into requests and label indices;
- `metrics`: accuracy, macro-F1, Brier, log loss, ECE, confusion matrix;
- `calibration`: priors from content-free inputs, divided out of a question's distribution or tempering it;
- `examples`: examples the model writes for a question, checked, then shown before the input;
- `fitting` / `profile`: per-question temperature + bias and linear readouts, stored per model;
- `evaluate`: a labelled set through a Decider, every mode from the same raw scores (a mode that asks other
  prompts from its own).
"""
