"""One module per chapter: its `judge` (the parameters and the runs' data in, the checks out: a
pure function, unit-tested on planted runs) and its figures. They read finished runs and compute
none, so editing them keeps the run cache (`training.NOT_RESULT_CODE`)."""
