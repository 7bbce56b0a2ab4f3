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

// Package atomicfile replaces files in one rename, so that a reader (nginx, the agent
// after a restart) sees the old content or the new one, never a part.
package atomicfile

import (
	"errors"
	"os"
	"path/filepath"
)

// TempPrefix starts the name of the temporary file Write renames into place; one left
// behind by an agent that died mid-write keeps it, so a disk's ownership check knows it
// as the agent's own.
const TempPrefix = ".edgepool-tmp-"

// Write writes data to a temporary file beside path, with mode perm, and renames it to
// path.
func Write(path string, data []byte, perm os.FileMode) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), TempPrefix)
	if err != nil {
		return err
	}
	_, werr := tmp.Write(data)
	merr := tmp.Chmod(perm)
	cerr := tmp.Close()
	if err := errors.Join(werr, merr, cerr); err != nil {
		_ = os.Remove(tmp.Name())
		return err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		_ = os.Remove(tmp.Name())
		return err
	}
	return nil
}
