"""The engine profiles fitted to, and scored against, published SD measurements
(`specmoe calibrate fit | heldout | frozen | check | specbundle`).

Modules, one concept each:
    rows        one published measurement per CSV row, with its setup and role
    catalog     the rows, example configs and hardware files, loaded once from package data
    pricing     a row priced as `advise --config` prices a question; the log errors a fit minimises
    fit         the marked constants refitted from their priors (`FitRule`: the shipped fit and the
                variants tested); reading and setting a profile's value by key
    heldout     leave-one-source-out, the trivial baselines, verdicts and summaries
    split       which scored rows were strict predictions and which were in the table at design time
    report      calibration.md and calibration.json
    shipped     the fitted constants and bands `calibrate fit --write` puts into constants.toml
    intervals   source-resampled intervals on the held-out medians; profile intervals per constant
    variants    a fit rule tested beside the shipped one
    steps       the plain step: the profiles' against the measured, and the measured step as input
    frozen      the shipped profiles on sources they never saw
    specbundle  rows and checks from the SpecBundle dashboard's data
The shipped rows are data/published.csv (and data/issue-threads.csv, kept out of every fit). The
constants themselves live in specmoe/perf/constants.toml, which the engine profiles read. See
docs/perf-model.md, "Calibration against published measurements".
"""
