// Argo CD Notifications' two languages, as Argo CD v3.6.1 runs them: trigger conditions (`when:` and
// `oncePer:`) in expr (github.com/expr-lang/expr, the version argo-cd's go.mod pins), and messages in
// text/template with Sprig's TxtFuncMap without env and expandenv (notifications-engine's
// templates.NewService). Both see the variables Argo CD's notification controller gives them
// (util/notification/settings and expression): app, context, secrets, appProject, and the helper
// namespaces time (Parse, Now, the durations and layouts), strings (ReplaceAll, ToUpper, ToLower) and repo
// (RepoURLToHTTPS, FullNameByRepoURL, QueryEscape, GetCommitMetadata of the commits the caller passes in
// "__tidecdCommits"). repo.GetAppDetails asks Argo CD's repo-server; tidecd's helper answers it with an error.
//
//	mode "expr":   items [{"expr": "...", "params": 0, "kind": "bool"|"string"}] →
//	               {"value": "true"|"false"} for bool (a non-bool result is false, as Argo CD's
//	               triggers.service reads it), fmt's %v of the result for string (oncePer)
//	mode "notify": items [{"template": "...", "params": 0}] → {"value": "..."}
//
// Parameters are decoded as Kubernetes' unstructured JSON is: whole numbers as int64, others as float64.
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"strings"
	"text/template"
	"time"

	"github.com/Masterminds/sprig/v3"
	giturls "github.com/chainguard-dev/git-urls"
	"github.com/expr-lang/expr"
)

type notifyItem struct {
	Template string `json:"template"`
	Expr     string `json:"expr"`
	Kind     string `json:"kind"`
	Params   int    `json:"params"`
}

type notifyBatch struct {
	Mode      string            `json:"mode"`
	Params    []json.RawMessage `json:"params"`
	Items     []notifyItem      `json:"items"`
	MaxOutput int               `json:"maxOutput"`
}

// unstructured decodes JSON as k8s.io/apimachinery's unstructured converter does (int64 or float64).
func unstructured(raw json.RawMessage) (map[string]any, error) {
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	var v map[string]any
	if err := d.Decode(&v); err != nil {
		return nil, err
	}
	out, _ := numbers(v).(map[string]any)
	return out, nil
}

func numbers(v any) any {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			x[k] = numbers(e)
		}
		return x
	case []any:
		for i, e := range x {
			x[i] = numbers(e)
		}
		return x
	case json.Number:
		if i, err := x.Int64(); err == nil {
			return i
		}
		f, _ := x.Float64()
		return f
	}
	return v
}

func timeExprs() map[string]any {
	return map[string]any{
		"Parse": parseTime, "Now": time.Now,
		"Nanosecond": time.Nanosecond, "Microsecond": time.Microsecond, "Millisecond": time.Millisecond,
		"Second": time.Second, "Minute": time.Minute, "Hour": time.Hour,
		"Layout": time.Layout, "ANSIC": time.ANSIC, "UnixDate": time.UnixDate, "RubyDate": time.RubyDate,
		"RFC822": time.RFC822, "RFC822Z": time.RFC822Z, "RFC850": time.RFC850, "RFC1123": time.RFC1123,
		"RFC1123Z": time.RFC1123Z, "RFC3339": time.RFC3339, "RFC3339Nano": time.RFC3339Nano,
		"Kitchen": time.Kitchen, "Stamp": time.Stamp, "StampMilli": time.StampMilli,
		"StampMicro": time.StampMicro, "StampNano": time.StampNano,
	}
}

// parseTime is Argo CD's time.Parse: RFC 3339, and a panic (an evaluation error) otherwise.
func parseTime(timestamp string) time.Time {
	res, err := time.Parse(time.RFC3339, timestamp)
	if err != nil {
		panic(err)
	}
	return res
}

func stringsExprs() map[string]any {
	return map[string]any{
		"ReplaceAll": strings.ReplaceAll, "ToUpper": strings.ToUpper, "ToLower": strings.ToLower,
	}
}

var gitSuffix = regexp.MustCompile(`\.git$`)

// commitMetadata is Argo CD's shared.CommitMetadata.
type commitMetadata struct {
	Message string
	Author  string
	Date    time.Time
	Tags    []string
}

// commitsKey names the parameter that carries the commits tidecd knows (revision → message, author, date):
// repo.GetCommitMetadata answers from it, as Argo CD's answers from its repo-server.
const commitsKey = "__tidecdCommits"

func repoExprs(commits map[string]any) map[string]any {
	unavailable := func(name string) func(...any) any {
		return func(...any) any {
			panic(fmt.Errorf("repo.%s is not available in tidecd (it asks Argo CD's repo-server)", name))
		}
	}
	return map[string]any{
		"GetCommitMetadata": func(sha string) any {
			found, ok := commits[sha].(map[string]any)
			if !ok {
				panic(fmt.Errorf("repo.GetCommitMetadata: commit %q is not one tidecd has fetched for this app", sha))
			}
			meta := commitMetadata{}
			meta.Message, _ = found["message"].(string)
			meta.Author, _ = found["author"].(string)
			if date, _ := found["date"].(string); date != "" {
				meta.Date, _ = time.Parse(time.RFC3339, date)
			}
			return meta
		},
		"RepoURLToHTTPS": func(raw string) string {
			parsed, err := giturls.Parse(raw)
			if err != nil {
				panic(err)
			}
			parsed.Scheme = "https"
			parsed.User = nil
			return parsed.String()
		},
		"FullNameByRepoURL": func(raw string) string {
			parsed, err := giturls.Parse(raw)
			if err != nil {
				panic(err)
			}
			path := gitSuffix.ReplaceAllString(parsed.Path, "")
			var parts []string
			for _, p := range strings.Split(path, "/") {
				if p != "" {
					parts = append(parts, p)
				}
			}
			if len(parts) >= 2 {
				return strings.Join(parts[:2], "/")
			}
			return path
		},
		"QueryEscape":   url.QueryEscape,
		"GetAppDetails": unavailable("GetAppDetails"),
	}
}

// spawn is Argo CD's expression.Spawn: the variables plus the helper namespaces.
func spawn(vars map[string]any) map[string]any {
	out := make(map[string]any, len(vars)+3)
	for k, v := range vars {
		out[k] = v
	}
	commits, _ := vars[commitsKey].(map[string]any)
	delete(out, commitsKey)
	out["time"] = timeExprs()
	out["strings"] = stringsExprs()
	out["repo"] = repoExprs(commits)
	return out
}

func notifyFuncMap() template.FuncMap {
	f := sprig.TxtFuncMap()
	delete(f, "env")
	delete(f, "expandenv")
	return f
}

func runExpr(text, kind string, env map[string]any) (value string, err error) {
	if text == "" && kind == "bool" {
		text = "false" // triggers.service: text.Coalesce(condition.When, "false")
	}
	program, err := expr.Compile(text)
	if err != nil {
		return "", fmt.Errorf("cannot compile %q: %w", text, err)
	}
	result, err := expr.Run(program, env)
	if err != nil {
		return "", fmt.Errorf("%q: %w", text, err)
	}
	if kind == "bool" {
		b, ok := result.(bool)
		return fmt.Sprint(ok && b), nil
	}
	return fmt.Sprintf("%v", result), nil
}

func runTemplate(text string, vars map[string]any, max int) (string, error) {
	t, err := template.New("notification").Funcs(notifyFuncMap()).Parse(text)
	if err != nil {
		return "", err
	}
	out := &capped{left: max}
	if err := t.Execute(out, vars); err != nil {
		if errors.Is(err, errTooLarge) {
			return "", fmt.Errorf("the rendered text is larger than %d bytes", max)
		}
		return "", err
	}
	return out.b.String(), nil
}

// runNotify answers a batch of mode "expr" or "notify".
func runNotify(in notifyBatch) ([]result, error) {
	if in.MaxOutput <= 0 {
		in.MaxOutput = 1 << 20
	}
	envs := make([]map[string]any, len(in.Params))
	for i, raw := range in.Params {
		vars, err := unstructured(raw)
		if err != nil {
			return nil, fmt.Errorf("parameter set %d is not a JSON object: %w", i, err)
		}
		envs[i] = spawn(vars)
	}
	results := make([]result, len(in.Items))
	for i, it := range in.Items {
		if it.Params < 0 || it.Params >= len(envs) {
			results[i] = result{Error: fmt.Sprintf("item %d names parameter set %d of %d", i, it.Params, len(envs))}
			continue
		}
		var value string
		var err error
		if in.Mode == "expr" {
			value, err = runExpr(it.Expr, it.Kind, envs[it.Params])
		} else {
			value, err = runTemplate(it.Template, envs[it.Params], in.MaxOutput)
		}
		if err == nil && len(value) > in.MaxOutput {
			err = fmt.Errorf("the result is larger than %d bytes", in.MaxOutput)
		}
		if err != nil {
			results[i] = result{Error: err.Error()}
		} else {
			results[i] = result{Value: &value}
		}
	}
	return results, nil
}
