/* moefast.h — the whole public API of the moefast inference engine:
 * moefast/engine.h (models, tokenizer, contexts and batches, sessions,
 * sampling, chat) and moefast/lab.h (flags, profile, ceiling, traces and the
 * gate, gen, quantize, bandwidth). */
#ifndef MOEFAST_H
#define MOEFAST_H

#include "moefast/engine.h"
#include "moefast/lab.h"

#endif
