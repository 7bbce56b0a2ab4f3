/*
Copyright 2026 The edgepool Authors.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

package agentapi

import (
	"net/http"
	"time"
)

// HTTPClient is the operator's client for the agents: bounded in time, and it follows no
// redirect. An agent answers for itself; a compromised cache pod must not send the
// operator to another address (inside the cluster, or a cloud's metadata endpoint) and
// have that answer, or its error, end up in a status its namespace can read. A redirect
// comes back as the 3xx it is, which callers refuse as they refuse any status but 200.
func HTTPClient(timeout time.Duration) *http.Client {
	return &http.Client{
		Timeout: timeout,
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		},
	}
}
