/* mixprec-plugin.h — the plugin ABI's name in libmixprec 1.0, kept so that
 * every plugin including it still builds; the ABI is mixprec-plugin-abi.h
 * (and MixprecPlugin, the object, mixprec-plugin-object.h). */
#pragma once

#include "mixprec-plugin-abi.h"
