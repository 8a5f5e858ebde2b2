"""ApplicationSets: generators, templating and the Applications they define.

    gotemplate/     the Go text/template subset (`goTemplate: true`): values, parse, execute, functions
    template.py     rendering an ApplicationSet's template for one parameter set (Go or fasttemplate form),
                    `templatePatch`
    model.py        reading an ApplicationSet document (strict, errors name the file and field)
    generators.py   list, cluster, git directories/files, matrix, merge, pull request
    expand.py       one evaluation: generators → parameter sets → Application documents, and the
                    `applicationsSync` policy against what was generated before

The use case that evaluates them and records the generated apps is `tidecd.usecases.appsets` (a layer above:
it reads git, clusters and GitHub); `tidecd.generated.records` joins the recorded apps to the config.
"""
