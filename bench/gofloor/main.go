// Command gofloor is the Go floor of bench/extender_bench.py: a minimal kube-scheduler
// extender written the way a Go one usually is (net/http + encoding/json, standard library
// only). It decodes the ExtenderArgs, reads each node's name, and answers with every node:
// /filter passes them all, /prioritize gives each score 0. No scoring, no state: the time
// it takes is what merely speaking the wire format costs in Go.
//
//	go build -o /tmp/gofloor bench/gofloor/main.go && /tmp/gofloor -addr 127.0.0.1:18901
package main

import (
	"encoding/json"
	"flag"
	"log"
	"net/http"
)

// extenderArgs mirrors k8s.io/kube-scheduler/extender/v1.ExtenderArgs; the nodes are kept
// as raw JSON so that /filter can answer with them unchanged.
type extenderArgs struct {
	Pod       json.RawMessage
	Nodes     *nodeList
	NodeNames *[]string
}

type nodeList struct {
	Metadata json.RawMessage   `json:"metadata"`
	Items    []json.RawMessage `json:"items"`
}

type nodeName struct {
	Metadata struct {
		Name string `json:"name"`
	} `json:"metadata"`
}

type filterResult struct {
	Nodes                      *nodeList
	NodeNames                  *[]string
	FailedNodes                map[string]string
	FailedAndUnresolvableNodes map[string]string
	Error                      string
}

type hostPriority struct {
	Host  string
	Score int64
}

func decode(w http.ResponseWriter, r *http.Request) (*extenderArgs, []string, bool) {
	var args extenderArgs
	if err := json.NewDecoder(r.Body).Decode(&args); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return nil, nil, false
	}
	var names []string
	if args.Nodes != nil {
		names = make([]string, 0, len(args.Nodes.Items))
		for _, raw := range args.Nodes.Items {
			var n nodeName
			if err := json.Unmarshal(raw, &n); err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return nil, nil, false
			}
			names = append(names, n.Metadata.Name)
		}
	} else if args.NodeNames != nil {
		names = *args.NodeNames
	}
	return &args, names, true
}

func reply(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	if err := json.NewEncoder(w).Encode(v); err != nil {
		log.Print(err)
	}
}

func main() {
	addr := flag.String("addr", "127.0.0.1:18901", "listen address")
	flag.Parse()
	http.HandleFunc("/filter", func(w http.ResponseWriter, r *http.Request) {
		args, _, ok := decode(w, r)
		if !ok {
			return
		}
		reply(w, filterResult{
			Nodes:                      args.Nodes,
			NodeNames:                  args.NodeNames,
			FailedNodes:                map[string]string{},
			FailedAndUnresolvableNodes: map[string]string{},
		})
	})
	http.HandleFunc("/prioritize", func(w http.ResponseWriter, r *http.Request) {
		_, names, ok := decode(w, r)
		if !ok {
			return
		}
		out := make([]hostPriority, len(names))
		for i, n := range names {
			out[i] = hostPriority{Host: n}
		}
		reply(w, out)
	})
	http.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte("ok"))
	})
	log.Fatal(http.ListenAndServe(*addr, nil))
}
