//go:build !mapsteps

package main

func runSteps() {}
