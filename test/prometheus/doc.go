// Package prometheus checks toolgate's alerts (charts/toolgate/files/
// alerts.yaml) with promtool, built from source into the cache
// (hack/build-promtool.sh): the rules must load (promtool check rules) and
// fire, and only fire, as alerts_test.yaml says (promtool test rules).
package prometheus
