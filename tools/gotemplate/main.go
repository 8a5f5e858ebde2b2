// Command tidecd-gotemplate renders ApplicationSet templates with Go's own text/template and Sprig, the
// versions Argo CD v3.6.1 pins, so tidecd generates what Argo CD's ApplicationSet controller generates.
//
// With "mode": "expr" or "notify" it evaluates Argo CD Notifications' trigger conditions and renders its
// messages instead (notify.go).
//
// It reads one JSON batch on stdin and writes one JSON answer on stdout: every string of one evaluation
// is rendered by one process (a start costs ~5 ms; one per string would cost seconds per ApplicationSet).
//
//	in:  {"goTemplate": true, "options": ["missingkey=error"], "params": [{...}, ...],
//	      "items": [{"template": "...", "params": 0}, ...], "maxOutput": 1048576}
//	out: {"results": [{"value": "..."} | {"error": "..."}, ...]}
//
// The function map is Argo CD's (applicationset/utils): Sprig's GenericFuncMap without env, expandenv and
// getHostByName (a template must not learn about the machine), plus normalize, slugify, toYaml, fromYaml,
// fromYamlArray and tpl. Unlike Argo CD, the functions whose result changes from one evaluation to the next
// (the clock, random values, generated keys and salts) are refused with an error naming them: tidecd
// evaluates on every tick, and such a function would change the generated app every time.
//
// Bounded: the output of each template stops at maxOutput bytes (an error), and the caller runs this
// process with a deadline and memory and file-size limits (tidecd.base.child).
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"
	"text/template"

	"github.com/Masterminds/sprig/v3"
	"github.com/gosimple/slug"
	"github.com/valyala/fasttemplate"
	"sigs.k8s.io/yaml"
)

// tplMaxDepth is Argo CD's TPL_FUNC_MAX_RECURSION_DEPTH.
const tplMaxDepth = 3

// unstable lists the Sprig functions refused because their value changes between evaluations.
var unstable = map[string]string{
	"now": "reads the clock", "ago": "reads the clock", "date": "reads the clock",
	"date_in_zone": "reads the clock", "dateInZone": "reads the clock", "htmlDate": "reads the clock",
	"htmlDateInZone": "reads the clock", "durationRound": "reads the clock",
	"randAlphaNum": "is random", "randAlpha": "is random", "randAscii": "is random",
	"randNumeric": "is random", "randBytes": "is random", "randInt": "is random", "uuidv4": "is random",
	"shuffle": "is random", "bcrypt": "uses a random salt", "htpasswd": "uses a random salt",
	"encryptAES": "uses a random IV", "genPrivateKey": "generates a key", "genCA": "generates a key",
	"genCAWithKey": "generates a certificate", "genSelfSignedCert": "generates a key",
	"genSelfSignedCertWithKey": "generates a certificate", "genSignedCert": "generates a key",
	"genSignedCertWithKey": "generates a certificate",
}

func funcMap() template.FuncMap {
	m := sprig.GenericFuncMap()
	delete(m, "env")
	delete(m, "expandenv")
	delete(m, "getHostByName")
	for name, why := range unstable {
		m[name] = refused(name, why)
	}
	m["normalize"] = sanitizeName
	m["slugify"] = slugifyName
	m["toYaml"] = toYAML
	m["fromYaml"] = fromYAML
	m["fromYamlArray"] = fromYAMLArray
	return template.FuncMap(m)
}

func refused(name, why string) func(...any) (string, error) {
	return func(...any) (string, error) {
		return "", fmt.Errorf("%s %s, so the generated Application would change on every evaluation; "+
			"tidecd does not offer it", name, why)
	}
}

var invalidDNSNameChars = regexp.MustCompile("[^-a-z0-9.]")

// sanitizeName is Argo CD's `normalize`: lower case, [-a-z0-9.] only, at most 253, no leading/trailing - or .
func sanitizeName(name string) string {
	name = invalidDNSNameChars.ReplaceAllString(strings.ToLower(name), "-")
	if len(name) > 253 {
		name = name[:253]
	}
	return strings.Trim(name, "-.")
}

// slugifyName is Argo CD's `slugify [maxSize [smartTruncate]] name` (the name is the last argument).
func slugifyName(args ...any) (string, error) {
	maxSize, smart, name := 50, true, ""
	for i, arg := range args {
		var ok bool
		switch i {
		case len(args) - 1:
			name, ok = arg.(string)
		case 0:
			maxSize, ok = arg.(int)
		case 1:
			smart, ok = arg.(bool)
		default:
			ok = true // Argo CD logs "Bad 'slugify' arguments." and goes on
		}
		if !ok {
			return "", fmt.Errorf("slugify: argument %d has the wrong type %T", i+1, arg)
		}
	}
	slug.EnableSmartTruncate = smart
	slug.MaxLength = maxSize
	return slug.Make(sanitizeName(name)), nil
}

func toYAML(v any) (string, error) {
	data, err := yaml.Marshal(v)
	if err != nil {
		return "", err
	}
	return strings.TrimSuffix(string(data), "\n"), nil
}

func fromYAML(s string) (map[string]any, error) {
	m := map[string]any{}
	if err := yaml.Unmarshal([]byte(s), &m); err != nil {
		return nil, err
	}
	return m, nil
}

func fromYAMLArray(s string) ([]any, error) {
	a := []any{}
	if err := yaml.Unmarshal([]byte(s), &a); err != nil {
		return nil, err
	}
	return a, nil
}

// withTpl adds Argo CD's `tpl`, bound to t so nested calls keep its options.
func withTpl(t *template.Template) *template.Template {
	depth := 0
	return t.Funcs(template.FuncMap{"tpl": func(text string, vals any) (string, error) {
		depth++
		defer func() { depth-- }()
		if depth > tplMaxDepth {
			return "", fmt.Errorf("maximum recursion depth %d exceeded in tpl function", tplMaxDepth)
		}
		c, err := t.Clone()
		if err != nil {
			return "", err
		}
		c, err = c.New(t.Name()).Parse(text)
		if err != nil {
			return "", fmt.Errorf("cannot parse template %q: %w", text, err)
		}
		var b strings.Builder
		if err := c.Execute(&b, vals); err != nil {
			return "", fmt.Errorf("error during tpl function execution for %q: %w", text, err)
		}
		return strings.ReplaceAll(b.String(), "<no value>", ""), nil
	}})
}

var errTooLarge = errors.New("output too large")

// capped stops a template's output at its limit (Execute then fails with errTooLarge).
type capped struct {
	b    strings.Builder
	left int
}

func (c *capped) Write(p []byte) (int, error) {
	if len(p) > c.left {
		return 0, errTooLarge
	}
	c.left -= len(p)
	return c.b.Write(p)
}

type item struct {
	Template string `json:"template"`
	Params   int    `json:"params"`
}

type batch struct {
	GoTemplate bool             `json:"goTemplate"`
	Options    []string         `json:"options"`
	Params     []map[string]any `json:"params"`
	Items      []item           `json:"items"`
	MaxOutput  int              `json:"maxOutput"`
}

type result struct {
	Value *string `json:"value,omitempty"`
	Error string  `json:"error,omitempty"`
}

var isTemplated = regexp.MustCompile(".*{{.*}}.*")

// goRender is Argo CD's Render.Replace with useGoTemplate: parse error and execute error worded as it does.
func goRender(base *template.Template, text string, params map[string]any, max int) (string, error) {
	t, err := base.Clone()
	if err != nil {
		return "", err
	}
	t = withTpl(t)
	parsed, err := t.Parse(text)
	if err != nil {
		return "", fmt.Errorf("failed to parse template %s: %w", text, err)
	}
	out := &capped{left: max}
	if err := parsed.Execute(out, params); err != nil {
		if errors.Is(err, errTooLarge) {
			return "", fmt.Errorf("the rendered text is larger than %d bytes", max)
		}
		return "", fmt.Errorf("failed to execute go template %s: %w", text, err)
	}
	return out.b.String(), nil
}

// fastRender is Argo CD's Render.Replace without goTemplate: `{{ key }}` replaced by a string parameter.
func fastRender(text string, params map[string]any, max int) (string, error) {
	if !isTemplated.MatchString(text) {
		return text, nil
	}
	t, err := fasttemplate.NewTemplate(text, "{{", "}}")
	if err != nil {
		return "", fmt.Errorf("invalid template: %w", err)
	}
	out := t.ExecuteFuncString(func(w io.Writer, tag string) (int, error) {
		key := strings.TrimSpace(tag)
		value, ok := params[key].(string)
		if key == "" || !ok {
			return fmt.Fprintf(w, "{{%s}}", tag)
		}
		return w.Write([]byte(value))
	})
	if len(out) > max {
		return "", fmt.Errorf("the rendered text is larger than %d bytes", max)
	}
	return out, nil
}

func main() {
	raw, err := io.ReadAll(bufio.NewReader(os.Stdin))
	var in batch
	var mode struct {
		Mode string `json:"mode"`
	}
	if err == nil {
		err = json.Unmarshal(raw, &mode)
	}
	if err == nil && (mode.Mode == "expr" || mode.Mode == "notify") {
		answerNotify(raw) // Argo CD Notifications' languages (notify.go)
		return
	}
	if err == nil {
		err = json.Unmarshal(raw, &in)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "tidecd-gotemplate: the batch is not JSON: %v\n", err)
		os.Exit(2)
	}
	if in.MaxOutput <= 0 {
		in.MaxOutput = 1 << 20
	}
	base := template.New("base").Funcs(funcMap())
	for _, option := range in.Options {
		if err := setOption(base, option); err != nil {
			fmt.Fprintf(os.Stderr, "tidecd-gotemplate: %v\n", err)
			os.Exit(2)
		}
	}
	results := make([]result, len(in.Items))
	for i, it := range in.Items {
		if it.Params < 0 || it.Params >= len(in.Params) {
			results[i] = result{Error: fmt.Sprintf("item %d names parameter set %d of %d", i, it.Params, len(in.Params))}
			continue
		}
		var value string
		var err error
		if in.GoTemplate {
			value, err = goRender(base, it.Template, in.Params[it.Params], in.MaxOutput)
		} else {
			value, err = fastRender(it.Template, in.Params[it.Params], in.MaxOutput)
		}
		if err != nil {
			results[i] = result{Error: err.Error()}
		} else {
			results[i] = result{Value: &value}
		}
	}
	answer(results)
}

func answer(results []result) {
	w := bufio.NewWriter(os.Stdout)
	if err := json.NewEncoder(w).Encode(map[string]any{"results": results}); err != nil {
		os.Exit(1)
	}
	if err := w.Flush(); err != nil {
		os.Exit(1)
	}
}

func answerNotify(raw []byte) {
	var in notifyBatch
	if err := json.Unmarshal(raw, &in); err != nil {
		fmt.Fprintf(os.Stderr, "tidecd-gotemplate: the batch is not JSON: %v\n", err)
		os.Exit(2)
	}
	results, err := runNotify(in)
	if err != nil {
		fmt.Fprintf(os.Stderr, "tidecd-gotemplate: %v\n", err)
		os.Exit(2)
	}
	answer(results)
}

// setOption applies a goTemplateOptions entry; text/template panics on an unknown one, so it is caught.
func setOption(t *template.Template, option string) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("goTemplateOptions: %v", r)
		}
	}()
	t.Option(option)
	return nil
}
