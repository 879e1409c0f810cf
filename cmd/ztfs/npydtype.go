package main

import (
	"fmt"

	"github.com/spf13/pflag"
)

// npyDTypeFlag is --npy-dtype: the float type of the tensor.npy values ztfs
// computes (widened small floats, dequantized tensors).
type npyDTypeFlag string

func (f *npyDTypeFlag) String() string {
	if *f == "" {
		return "float32"
	}
	return string(*f)
}

func (f *npyDTypeFlag) Set(v string) error {
	switch v {
	case "float32", "f4", "<f4":
		*f = "float32"
	case "float16", "f2", "<f2":
		*f = "float16"
	default:
		return fmt.Errorf("%q is not float32 or float16", v)
	}
	return nil
}

func (f *npyDTypeFlag) Type() string { return "dtype" }

// half reports whether float16 was asked for.
func (f *npyDTypeFlag) half() bool { return *f == "float16" }

// register declares --npy-dtype; inspect and verify take it too, to show
// and read the tree as a mount with it serves it.
func (f *npyDTypeFlag) register(fl *pflag.FlagSet) {
	fl.Var(f, "npy-dtype", "float type of computed tensor.npy values: float32, or float16 (half the size)")
}
