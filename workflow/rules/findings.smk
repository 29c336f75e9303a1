use rule light_job as findings with:
    input:
        unpack(findings_inputs),
    output:
        table=report_table("results/findings/findings", "findings", FINDINGS, "Statements"),
        runs_table="results/findings/runs.csv",
        statements_path="results/findings/statements.csv",
        quantities="results/findings/quantities.csv",
        concordance="results/findings/concordance.csv",
        rankings="results/findings/rankings.csv",
        figures_dir=report_dir("results/findings/figures", "{name}.png", "findings_figures", FINDINGS, "Figures"),
    log:
        "results/logs/findings/findings.log",
    benchmark:
        "results/benchmarks/findings/findings.tsv"
    localrule: True
    params:
        cfg=keys(findings=["min_share", "alpha", "sanity_max_rho", "surrogate_share"], figures=["dpi"]),
        runs=grid_runs(),
