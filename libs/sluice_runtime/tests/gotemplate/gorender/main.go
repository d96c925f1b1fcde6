package main

// gorender renders a batch of templates with Go's text/template and sprig's hermetic
// functions, plus toYaml as Flux Operator defines it (sigs.k8s.io/yaml: JSON, then
// go-yaml v2), for the differential tests of sluice_runtime.gotemplate.
// Built offline in GOPATH mode against Debian's golang-github-masterminds-sprig-dev.

import (
	"fmt"
	"encoding/json"
	"os"
	"strings"
	"text/template"

	sprig "github.com/Masterminds/sprig"
	yaml "gopkg.in/yaml.v2"
)

type tcase struct {
	Template   string          `json:"template"`
	Data       json.RawMessage `json:"data"`
	Left       string          `json:"left"`
	Right      string          `json:"right"`
	MissingKey string          `json:"missingkey"`
}

type result struct {
	Out string `json:"out"`
	Err string `json:"err"`
	Ok  bool   `json:"ok"`
}

func convert(v any) any {
	switch t := v.(type) {
	case json.Number:
		if i, err := t.Int64(); err == nil && !strings.ContainsAny(string(t), ".eE") {
			return int(i)
		}
		f, _ := t.Float64()
		return f
	case map[string]any:
		for k, x := range t {
			t[k] = convert(x)
		}
		return t
	case []any:
		for i, x := range t {
			t[i] = convert(x)
		}
		return t
	}
	return v
}

func jsonToYAML(j []byte) ([]byte, error) {
	var obj any
	if err := yaml.Unmarshal(j, &obj); err != nil {
		return nil, err
	}
	return yaml.Marshal(obj)
}

func toYaml(v any) string {
	j, err := json.Marshal(v)
	if err != nil {
		return ""
	}
	y, err := jsonToYAML(j)
	if err != nil {
		return ""
	}
	return string(y)
}

func mustToYaml(v any) (string, error) {
	j, err := json.Marshal(v)
	if err != nil {
		return "", err
	}
	y, err := jsonToYAML(j)
	return string(y), err
}

func render(c tcase) (out string, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = &panicErr{r}
		}
	}()
	dec := json.NewDecoder(strings.NewReader(string(c.Data)))
	dec.UseNumber()
	var data any
	if len(c.Data) > 0 {
		if err := dec.Decode(&data); err != nil {
			return "", err
		}
	}
	data = convert(data)
	funcs := sprig.HermeticTxtFuncMap()
	funcs["toYaml"] = toYaml
	funcs["mustToYaml"] = mustToYaml
	t := template.New("template").Delims(c.Left, c.Right).Funcs(funcs)
	if c.MissingKey != "" {
		t = t.Option("missingkey=" + c.MissingKey)
	}
	t, err = t.Parse(c.Template)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	err = t.Execute(&b, data)
	return b.String(), err
}

type panicErr struct{ v any }

func (p *panicErr) Error() string { return fmt.Sprint("panic: ", p.v) }

func main() {
	var cases []tcase
	if err := json.NewDecoder(os.Stdin).Decode(&cases); err != nil {
		panic(err)
	}
	results := make([]result, len(cases))
	for i, c := range cases {
		out, err := render(c)
		if err != nil {
			results[i] = result{Out: out, Err: err.Error()}
		} else {
			results[i] = result{Out: out, Ok: true}
		}
	}
	enc := json.NewEncoder(os.Stdout)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(results)
}
