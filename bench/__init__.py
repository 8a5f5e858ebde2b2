"""`make bench`: tidecd against its peers, measured in the same run, printed as a table of ratios.

The machine is shared and noisy, so absolute times mean little: every row compares two timings taken
back to back in one run (repeated, medians), and the ratio is what to read. Groups, one module each:

    render     cold render vs the manifest cache (directory, kustomize, helm) and the raw tools
    diff       refresh of a synced 500-object app, cold vs warm comparison cache, vs `kubectl diff`
    sync       200-object app: cold sync, no-op resync, one-object change vs `kubectl apply` and kapp
    functions  webhook → Synced+Healthy, a poll tick over 1,000 apps, cold start of each target

`python -m bench` runs them all; `python -m bench sync` runs one group.
"""
